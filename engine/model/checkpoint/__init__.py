"""Reading checkpoints from disk. `engine.model.loading.loader.load_model` is the entry point."""

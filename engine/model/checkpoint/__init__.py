"""Reading checkpoints from disk. `engine.model.checkpoint.loader.load_model` is the entry point."""

"""Reading checkpoints from disk. `engine.checkpoint.loader.load_model` is the entry point."""

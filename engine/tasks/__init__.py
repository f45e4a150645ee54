"""Tasks: the work the engine serves besides generation, each through one runner on the engine thread
(`task_registry.py` says how a task plugs in); `encode/` is the embedding and rerank task."""

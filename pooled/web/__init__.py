"""The HTTP side of the process: the app's assembly, the guards, error bodies, request counting,
uvicorn and the metrics listener."""

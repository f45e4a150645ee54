"""The ids the model commands name models by: a catalog entry by its id or as `pooled/<id>` (what
the server serves it as), a model put in the models folder by hand as `pooled/<name>`.

`folder_model_id` is pooled/model_host.py's `model_id_for`, kept here so that `pooled list` and
`rm` need not import the engine (two seconds) to name a file; a test checks the two agree.
"""

from pathlib import Path

PREFIX = "pooled/"


def folder_model_id(path: Path) -> str:
    name = path.name.removesuffix(".gguf") if path.is_file() else path.name
    return PREFIX + name.lower().replace(".", "-")


def bare(model_id: str) -> str:
    """A catalog id without the `pooled/` the server serves it under."""
    return model_id.removeprefix(PREFIX)

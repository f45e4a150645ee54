"""The ids the model commands name models by: a catalog entry by its id or as `pooled/<id>` (what
the server serves it as), a model put in the models folder by hand as `pooled/<name>`.

They live apart from pooled/hosting/model_host.py so that `pooled list` and `rm` need not import the
engine (two seconds) to name a file.
"""

from pathlib import Path

PREFIX = "pooled/"


def model_id_for(path: Path) -> str:
    """The id a model file or directory serves as: `pooled/<name>`, lower case, dots as dashes."""
    name = path.name.removesuffix(".gguf") if path.is_file() else path.name
    return PREFIX + name.lower().replace(".", "-")


def bare(model_id: str) -> str:
    """A catalog id without the `pooled/` the server serves it under."""
    return model_id.removeprefix(PREFIX)


def beside_model_path(value: str, models_dir: str) -> Path:
    """The folder a model served beside the chat model names (`--speech-model`): a path, else a
    folder of that name (or `pooled/<name>`) in the models folder, else the path as given (for the
    start's check to say it does not exist)."""
    path = Path(value).expanduser()
    if path.exists():
        return path
    in_folder = Path(models_dir).expanduser() / bare(value)
    return in_folder if in_folder.is_dir() else path

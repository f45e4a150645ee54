"""Which LoRA adapter a generation runs with, and the model name its answer carries.

`lora_adapter` names one outright; otherwise a `model` that names a loaded adapter chooses it (as
vLLM serves adapters), and any other `model` string runs the served model. A `lora_adapter` the
engine does not serve is refused when the request is submitted: a 400 naming the loaded ones.
"""

from __future__ import annotations

from handlers.context import ModelService


def chosen_adapter(model: ModelService, requested_model: str | None, lora_adapter: str | None = None) -> str | None:
    if lora_adapter:
        return lora_adapter
    adapters = model.adapters
    if not requested_model or adapters is None:
        return None
    ready = (entry.name for entry in adapters.listing() if entry.state == "ready")
    return requested_model if requested_model in ready else None


def answering_model(model: ModelService, adapter: str | None) -> str:
    """The answer's `model`: the adapter's name when the request ran with one."""
    return adapter or model.model_id

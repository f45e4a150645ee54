"""The host-side preparation of a request's inputs that handlers do before they submit it: an
image decoded and resized by the model's rules (`engine.api.Vision`) into the `PreparedImage` a
`GenerationRequest` carries. No JAX at import: handlers use it."""

from engine.model.families.qwen2_vl.image_processing import ImageError, prepare_image
from engine.model.image_tower import PreparedImage

__all__ = ["ImageError", "PreparedImage", "prepare_image"]

"""The host-side preparation of a request's inputs that handlers do before they submit it: an
image decoded and resized by the model's rules (`engine.api.Vision`) into the `PreparedImage` a
`GenerationRequest` carries. No JAX at import: handlers use it."""

from engine.vision.images import ImageError, PreparedImage, prepare_image

__all__ = ["ImageError", "PreparedImage", "prepare_image"]

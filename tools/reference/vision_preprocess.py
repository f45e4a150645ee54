"""Goldens for engine/model/families/qwen2_vl/image_processing.py: transformers' Qwen2-VL image processor
on `tests.engine.tiny_images`.

The PIL backend (`Qwen2VLImageProcessorPil`) is the reference, given each fixture's bytes opened with
Pillow; its `image_grid_thw`, the sha256 of its float32 `pixel_values` and their row sums (to say
where a mismatch lies) go to tests/goldens/vision_preprocess.json: no array of numbers is stored. Where
torchvision is installed, the torchvision backend (transformers' default) runs too, and the largest
difference between the two is printed, not stored.
"""

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import transformers
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from tests.engine.tiny_images import tiny_images


def _torchvision_processor(max_pixels: int | None) -> object | None:
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    except ImportError:
        return None
    return Qwen2VLImageProcessor() if max_pixels is None else Qwen2VLImageProcessor(max_pixels=max_pixels)


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    golden: dict[str, object] = {"transformers_version": transformers.__version__}
    gaps: list[float] = []
    for name, fixture in tiny_images().items():
        pil = (
            Qwen2VLImageProcessorPil()
            if fixture.max_pixels is None
            else Qwen2VLImageProcessorPil(max_pixels=fixture.max_pixels)
        )
        batch = pil(images=Image.open(io.BytesIO(fixture.data)), return_tensors="np")
        pixel_values = np.asarray(batch["pixel_values"], dtype=np.float32)
        grid = np.asarray(batch["image_grid_thw"], dtype=np.int64)
        golden[name] = {
            "grid": grid[0].tolist(),
            "shape": list(pixel_values.shape),
            "sha256": hashlib.sha256(np.ascontiguousarray(pixel_values).tobytes()).hexdigest(),
            "row_sums": pixel_values.astype(np.float64).sum(axis=1).tolist(),
        }
        line = f"{name}: pixel_values {pixel_values.shape}, grid {grid.tolist()}"
        fast = _torchvision_processor(fixture.max_pixels)
        if fast is not None:
            other = fast(images=Image.open(io.BytesIO(fixture.data)), return_tensors="np")  # type: ignore[operator]
            assert np.array_equal(np.asarray(other["image_grid_thw"]), grid), name
            gap = float(np.abs(np.asarray(other["pixel_values"]) - pixel_values).max())
            gaps.append(gap)
            line += f", torchvision backend max |diff| {gap:.6f}"
        print(line)
    target = out_dir / "vision_preprocess.json"
    target.write_text(json.dumps(golden) + "\n", encoding="utf-8")
    print(f"wrote {target} ({target.stat().st_size} bytes)")
    if gaps:
        print(f"torchvision backend vs PIL backend: max |diff| {max(gaps):.6f} over all fixtures")
    else:
        print("torchvision not installed: the torchvision backend was not compared")

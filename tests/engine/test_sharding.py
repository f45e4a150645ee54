"""Tensor-parallel logits on 4 simulated CPU devices equal single-device logits."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess over simulated devices

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tensor_parallel_matches_single_device() -> None:
    script = Path(__file__).with_name("sharded_parity.py")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, str(script), "llama_tied", "qwen3_moe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])

    # Each device's rows alone are read (and cast): a process group's process reads only its shards.
    assert report.pop("place") == {"read": [[2, 6]] * 4, "equal": True, "dtype": "float32"}
    for name, model in report.items():
        assert model["restored_from_cache"], name
        assert model["max_diff_fresh"] < 1e-4, (name, model)  # only the summation order differs
        assert model["max_diff_restored"] < 1e-4, (name, model)  # only the summation order differs
        assert model["embedding_spec"] == "('tp', None)"
        # int8 matmuls sum exactly in int32; only the float parts' order differs.
        assert model["max_diff_w8a8"] < 1e-4 * model["max_abs_w8a8"], (name, model)
        assert model["w8a8_q_scale_spec"] == "('tp', None)"  # a kernel's scales split like its outputs
        # Q4 blocks split by output channels only (their bytes interleave groups of 8 channels).
        assert model["w4a8_q_packed"], name
        assert model["w4a8_q_spec"] == "('tp', None, None)", (name, model)
        assert model["max_diff_w4a8"] < 1e-4 * model["max_abs_w4a8"], (name, model)
        assert model["specs"]["attn/q/kernel"] == "(None, 'tp', None)"
        # 2 KV heads do not split over 4 devices, so they stay replicated.
        assert model["specs"]["attn/k/kernel"] == "(None, None, None)"

    assert report["llama_tied"]["specs"]["mlp/gate/kernel"] == "(None, 'tp')"
    assert report["qwen3_moe"]["specs"]["moe/gate"] == "('tp', None, None)"

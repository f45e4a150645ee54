"""tools/device_check.sh, the accelerator check, in its dry mode on the CPU: every step's commands
still run (the parity tests collected, a tiny random checkpoint built, the bench planned), so the
script is ready when a GPU or TPU is lent."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # the whole script, its parity-test collection and tiny checkpoint


def test_the_device_check_runs_dry_on_the_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", str(REPO / "tools" / "device_check.sh"), "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = (tmp_path / "device_check.log").read_text()
    assert "platform: cpu" in log and "default backend: cpu" in log
    collected = next(line for line in log.splitlines() if line.endswith(" collected") or " tests collected" in line)
    assert int(collected.split()[0]) > 20, collected  # the parity files exist and import
    assert "pooled serve parses" in log
    assert "random tiny llama" in log and (tmp_path / "random-tiny" / "tokenizer.json").is_file()
    assert "device bench plan:" in log and "[device-tiny]" in log
    assert (tmp_path / "BENCHMARKS.md").read_text() == (REPO / "docs" / "BENCHMARKS.md").read_text()
    assert log.rstrip().endswith("== done")

"""Speech to text: pooled against faster-whisper on the same Whisper models, same machine, one run.

    python tools/speech_bench.py [--rounds 3] [--peer-python PATH] [--write docs/BENCHMARKS.md]

The models are the two the tests use (tests/speech_models.py: tiny.en and base, CTranslate2
folders from PyPI); the recording is tests/data/jfk.wav (11 s). pooled serves each model alone
(`pooled serve --model FOLDER`) and is asked through /v1/audio/transcriptions; faster-whisper
(`faster-whisper==1.2.1`, `make reference` installs it; `--peer-python` names another Python that
has it) runs in a process of its own (tools/reference/faster_whisper_peer.py) with
`compute_type` int8 and float32 and as many threads as the machine has cores. Both decode greedily
(beam 1, temperature 0, no VAD).

Figures, each the median of `--rounds` after a warm-up:
- one file: one request's wall time, one at a time;
- 8 concurrent: 8 requests of the recording at once, audio seconds over wall time (faster-whisper:
  its batched path, `BatchedInferencePipeline`, over 8 copies as 8 clips with batch_size 8);
- peak RSS of the serving process (VmHWM), after all of the above.
The section of docs/BENCHMARKS.md between its speech markers is rewritten with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from bench import REPO, machine_line, peak_rss_mib, pooled_command, running, write_section

from tests.speech_models import JFK_WAV, whisper_base, whisper_tiny_en

PORT = 8096
CONCURRENT = 8
PEER = REPO / "tools" / "reference" / "faster_whisper_peer.py"
JFK_SECONDS = 11.0


@dataclass(frozen=True)
class Figures:
    one_file_s: float
    audio_s_per_s: float
    peak_rss_mib: float
    text: str


def transcribe(base_url: str, audio: bytes) -> str:
    response = httpx.post(
        base_url + "/v1/audio/transcriptions",
        files={"file": ("jfk.wav", audio, "audio/wav")},
        data={"model": "whisper", "temperature": "0", "response_format": "json"},
        timeout=600,
    )
    response.raise_for_status()
    text: str = response.json()["text"]
    return text


def measure_pooled(model: Path, rounds: int) -> Figures:
    base_url = f"http://127.0.0.1:{PORT}"
    audio = JFK_WAV.read_bytes()
    with running(pooled_command(model, PORT, []), base_url, "/health") as started:
        text = transcribe(base_url, audio)  # warm-up
        times = []
        for _ in range(rounds):
            begun = time.perf_counter()
            transcribe(base_url, audio)
            times.append(time.perf_counter() - begun)
        rates = []
        with ThreadPoolExecutor(CONCURRENT) as pool:
            for _ in range(rounds + 1):
                begun = time.perf_counter()
                list(pool.map(lambda _: transcribe(base_url, audio), range(CONCURRENT)))
                rates.append(CONCURRENT * JFK_SECONDS / (time.perf_counter() - begun))
        return Figures(statistics.median(times), statistics.median(rates[1:]), peak_rss_mib(started.process.pid), text)


def measure_peer(python: str, model: Path, compute_type: str, rounds: int) -> Figures:
    command = [python, str(PEER), str(model), str(JFK_WAV), "--compute-type", compute_type]
    command += ["--threads", str(os.cpu_count() or 1), "--rounds", str(rounds), "--copies", str(CONCURRENT)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return Figures(**json.loads(out.strip().splitlines()[-1]))


def markdown(rows: list[tuple[str, Figures, Figures, Figures]], command: str) -> str:
    lines = [
        f"Machine: {machine_line()}. Date: {time.strftime('%Y-%m-%d')}. Command: `{command}`.",
        "",
        "| model | figure | pooled | faster-whisper int8 | faster-whisper float32 | pooled ÷ int8 |",
        "|---|---|---|---|---|---|",
    ]
    for name, ours, int8, f32 in rows:
        lines += [
            f"| {name} | one file (s, lower is better) | {ours.one_file_s:.3f} | {int8.one_file_s:.3f} | "
            f"{f32.one_file_s:.3f} | {int8.one_file_s / ours.one_file_s:.2f}× speed |",
            f"| {name} | {CONCURRENT} concurrent (audio s/s) | {ours.audio_s_per_s:.1f} | {int8.audio_s_per_s:.1f} | "
            f"{f32.audio_s_per_s:.1f} | {ours.audio_s_per_s / int8.audio_s_per_s:.2f}× |",
            f"| {name} | peak RSS (MiB) | {ours.peak_rss_mib:.0f} | {int8.peak_rss_mib:.0f} | "
            f"{f32.peak_rss_mib:.0f} | {ours.peak_rss_mib / int8.peak_rss_mib:.2f}× |",
        ]
    lines += ["", "Texts: " + "; ".join(f"{name}: pooled {ours.text!r}" for name, ours, _, _ in rows), ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args()
    tiny = whisper_tiny_en()
    base = whisper_base(Path(tempfile.gettempdir()) / "pooled-bench-whisper-base")
    if tiny is None or base is None:
        print("the Whisper model packages are not installed (make setup installs them)", file=sys.stderr)
        return 1
    rows = []
    for name, model in (("tiny.en", tiny), ("base", base)):
        int8 = measure_peer(args.peer_python, model, "int8", args.rounds)
        f32 = measure_peer(args.peer_python, model, "float32", args.rounds)
        ours = measure_pooled(model, args.rounds)
        rows.append((name, ours, int8, f32))
    text = markdown(rows, "python tools/speech_bench.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.write:
        write_section(args.write, "speech", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""faster-whisper's side of tools/speech_bench.py, run in a process of its own so that its peak RSS
is its own: prints one JSON object of its figures.

    python tools/reference/faster_whisper_peer.py MODEL AUDIO --compute-type int8 --threads 2

- one file: `WhisperModel.transcribe` of AUDIO (greedy, beam_size=1, temperature 0, no VAD), the
  median wall time of `--rounds`, the segments consumed (its transcribe is lazy);
- concurrent: `BatchedInferencePipeline` over `--copies` copies of AUDIO joined with a second of
  silence, each copy a clip of its own (`clip_timestamps`, no VAD), `batch_size` = copies: audio
  seconds over wall time;
- peak RSS (VmHWM) at the end.

Needs faster-whisper (`make reference` installs it); never imported by pooled itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from faster_whisper import BatchedInferencePipeline, WhisperModel
from faster_whisper.audio import decode_audio

SAMPLE_RATE = 16000


def peak_rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("audio")
    parser.add_argument("--compute-type", default="int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=8)
    args = parser.parse_args()

    model = WhisperModel(args.model, device="cpu", compute_type=args.compute_type, cpu_threads=args.threads)
    audio = decode_audio(args.audio, sampling_rate=SAMPLE_RATE)
    options = {"beam_size": 1, "temperature": 0.0, "vad_filter": False}
    times, text = [], ""
    for _ in range(args.rounds + 1):  # the first round warms up
        started = time.perf_counter()
        segments, _ = model.transcribe(audio, **options)
        text = "".join(segment.text for segment in segments)
        times.append(time.perf_counter() - started)
    one_file_s = statistics.median(times[1:])

    gap = np.zeros(SAMPLE_RATE, np.float32)
    joined = np.concatenate([part for _ in range(args.copies) for part in (audio, gap)])
    seconds = len(audio) / SAMPLE_RATE
    clips = [{"start": i * (seconds + 1.0), "end": i * (seconds + 1.0) + seconds} for i in range(args.copies)]
    batched = BatchedInferencePipeline(model)
    rates = []
    for _ in range(args.rounds + 1):
        started = time.perf_counter()
        segments, _ = batched.transcribe(joined, batch_size=args.copies, clip_timestamps=clips, **options)
        list(segments)
        rates.append(args.copies * seconds / (time.perf_counter() - started))
    print(
        json.dumps(
            {
                "one_file_s": one_file_s,
                "audio_s_per_s": statistics.median(rates[1:]),
                "peak_rss_mib": peak_rss_mib(),
                "text": text,
            }
        )
    )


if __name__ == "__main__":
    main()

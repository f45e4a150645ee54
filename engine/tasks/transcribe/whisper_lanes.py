"""The host's handle on the transcribe task's device programs (lane_programs.py): the model's
parameters and the lanes' caches on the CPU device, the programs compiled for every shape, and
the calls that feed them numpy arrays and read back only the drawn tokens and what the host
decides with."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from engine.device.runner_api import Report
from engine.model.families.whisper import LoadedWhisper, WhisperVocabulary
from engine.stats import HeldArrays
from engine.tasks.transcribe.lane_programs import (
    ALIGN_LENGTHS,
    PREFILL_LENGTHS,
    Programs,
    bucket,
    encoder_batches,
)
from engine.tasks.transcribe.logit_rules import LaneHistory, RuleTokens
from engine.tasks.transcribe.segmenting import MAX_INITIAL_TIMESTAMP, TIME_PRECISION, WINDOW_FRAMES
from engine.tasks.transcribe.transcription import Transcription
from engine.tasks.transcribe.word_alignment import TimedWord, attention_matrix, timed_words


@dataclass(eq=False)
class Lane:
    """A window being decoded in a lane: its current attempt and the tokens it drew."""

    transcription: Transcription
    prompt_length: int
    temperature: float
    seed: int
    no_speech_prob: float
    limit: int  # the most tokens the attempt draws (the end of text included)
    tokens: list[int] = field(default_factory=list)  # drawn, the end of text not included
    logprobs: list[float] = field(default_factory=list)
    # At a temperature above 0: the attempt's samples drawn before this one (tokens, logprobs).
    samples: list[tuple[list[int], list[float]]] = field(default_factory=list)


@dataclass(frozen=True)
class FirstDraw:
    """A prefill's results, read back."""

    token: int
    logprob: float
    no_speech_prob: float
    language_logprobs: np.ndarray  # over `WhisperLanes.language_ids`


def rule_tokens(model: LoadedWhisper) -> RuleTokens:
    """The rules' tokens: the checkpoint's suppressed tokens and every special token but the end
    of text and the timestamps (faster-whisper's list); at a window's start also the blank and
    the end of text."""
    v = model.vocabulary
    specials = (v.transcribe, v.translate, v.sot, v.sot_prev, v.sot_lm, v.no_speech)
    blank = v.token_bytes.index(b" ") if b" " in v.token_bytes else v.eot
    return RuleTokens(
        vocab_size=model.config.vocab_size,
        eot=v.eot,
        no_timestamps=v.no_timestamps,
        timestamp_begin=v.timestamp_begin,
        suppress=tuple(sorted({*v.suppress_tokens, *specials})),
        begin_suppress=tuple(sorted(set(v.begin_suppress) or {blank, v.eot})),
        max_initial_timestamp=round(MAX_INITIAL_TIMESTAMP / TIME_PRECISION),
    )


class WhisperLanes:
    def __init__(self, model: LoadedWhisper, lanes: int, encoder_batch: int, device: jax.Device) -> None:
        vocabulary: WhisperVocabulary = model.vocabulary
        self.vocabulary = vocabulary
        self.lanes = lanes
        # A model without languages (English-only) still gets one entry: the programs' shapes are static.
        self.language_ids = tuple(vocabulary.languages.values()) or (vocabulary.sot,)
        self._programs = Programs(model.config, rule_tokens(model), vocabulary.no_speech, self.language_ids, lanes)
        self._batches = encoder_batches(encoder_batch)
        self._step_sizes = encoder_batches(lanes)  # the first 1, 2, 4… lanes
        self._device = device
        self._params = jax.device_put(model.params, device)
        self._state = self._programs.empty_state(self._params, device)
        self._jitted: dict[str, Any] = {
            "admit": jax.jit(self._programs.admit, donate_argnums=1),
            "prefill": jax.jit(self._programs.prefill, donate_argnums=1),
            "step": jax.jit(self._programs.step, donate_argnums=1),
            "align": jax.jit(self._programs.align),
        }
        self._compiled: dict[tuple[str, int], Callable[..., Any]] = {}

    def held_arrays(self) -> HeldArrays:
        return HeldArrays(tuple(jax.tree.leaves(self._state)), tuple(jax.tree.leaves(self._params)))

    def compile(self, report: Report) -> None:
        """Compiles every shape: the encoder's batches, the prompt lengths, the step, the alignment lengths."""
        n_mels = self._programs.config.n_mels
        shapes: list[tuple[str, int, tuple[Any, ...]]] = []
        for size in self._batches:
            lanes = np.zeros(size, np.int32)
            shapes.append(("admit", size, (lanes, np.zeros((size, n_mels, WINDOW_FRAMES), np.float32))))
        for length in PREFILL_LENGTHS:
            shapes.append(("prefill", length, self._prefill_args(0, [0] * length, length, 0, 0.0, 0)))
        for size in self._step_sizes:
            shapes.append(("step", size, self._step_args([None] * size)))
        for length in ALIGN_LENGTHS:
            shapes.append(("align", length, (np.int32(0), np.zeros(length, np.int32))))
        for done, (name, size, args) in enumerate(shapes, 1):
            lowered = self._jitted[name].lower(self._params, self._state, *args)
            self._compiled[name, size] = lowered.compile()
            report("compiling the speech model", done, len(shapes))

    def _run(self, name: str, size: int, *args: Any) -> Any:
        # After `compile`, the shape's own executable: a request never compiles.
        program = self._compiled.get((name, size), self._jitted[name])
        return program(self._params, self._state, *args)

    def admit(self, lanes: Sequence[int], mel: np.ndarray) -> None:
        """Encodes the windows' mel [n, n_mels, WINDOW_FRAMES] into `lanes` (n of them)."""
        size = bucket(len(lanes), self._batches)
        indices = np.full(size, self.lanes, np.int32)  # past the last lane: dropped
        indices[: len(lanes)] = lanes
        padded = np.zeros((size, *mel.shape[1:]), np.float32)
        padded[: len(lanes)] = mel
        self._state = self._run("admit", size, indices, padded)

    def prefill(self, lane: int, prompt: Sequence[int], sot_index: int, temperature: float, seed: int) -> FirstDraw:
        """Writes `prompt` into `lane`'s cache and draws its first token."""
        length = bucket(len(prompt), PREFILL_LENGTHS)
        args = self._prefill_args(lane, prompt, length, sot_index, temperature, seed)
        self._state, drawn = self._run("prefill", length, *args)
        return FirstDraw(
            int(drawn.token), float(drawn.logprob), float(drawn.no_speech_prob), np.asarray(drawn.language_logprobs)
        )

    def _prefill_args(
        self, lane: int, prompt: Sequence[int], length: int, sot_index: int, temperature: float, seed: int
    ) -> tuple[Any, ...]:
        tokens = np.full(length, self.vocabulary.eot, np.int32)
        tokens[: len(prompt)] = prompt
        return (
            np.int32(lane),
            tokens,
            np.int32(len(prompt)),
            np.int32(sot_index),
            np.float32(temperature),
            np.uint32(seed),
        )

    def step(self, busy: Sequence[Lane | None]) -> tuple[np.ndarray, np.ndarray]:
        """The next token and its log-probability of each lane up to the last busy one (an idle
        lane's are meaningless)."""
        last = max((i for i, lane in enumerate(busy) if lane is not None), default=0)
        size = bucket(last + 1, self._step_sizes)
        self._state, tokens, logprobs = self._run("step", size, *self._step_args(busy[:size]))
        return np.asarray(tokens), np.asarray(logprobs)

    def _step_args(self, busy: Sequence[Lane | None]) -> tuple[Any, ...]:
        count = len(busy)
        tokens, positions = np.zeros(count, np.int32), np.zeros(count, np.int32)
        drawn = np.zeros(count, np.int32)
        last, penultimate, last_timestamp = (np.full(count, -1, np.int32) for _ in range(3))
        temperature, seeds = np.zeros(count, np.float32), np.zeros(count, np.uint32)
        timestamp_begin = self.vocabulary.timestamp_begin
        for i, lane in enumerate(busy):
            if lane is None or not lane.tokens:
                continue
            tokens[i] = last[i] = lane.tokens[-1]
            positions[i] = lane.prompt_length + len(lane.tokens) - 1
            drawn[i] = len(lane.tokens)
            if len(lane.tokens) > 1:
                penultimate[i] = lane.tokens[-2]
            last_timestamp[i] = next((t for t in reversed(lane.tokens) if t >= timestamp_begin), -1)
            temperature[i], seeds[i] = lane.temperature, lane.seed
        return tokens, positions, LaneHistory(drawn, last, penultimate, last_timestamp), temperature, seeds

    def align(
        self, lane: int, sot_sequence: Sequence[int], text: Sequence[int], frames: int, language: str
    ) -> list[TimedWord]:
        """The words of `text` (the window's text tokens) timed over the window's `frames` of audio
        in `lane`, in seconds from the window's start."""
        if not text:
            return []
        v = self.vocabulary
        sequence = [*sot_sequence, v.no_timestamps, *text, v.eot]
        length = bucket(len(sequence), ALIGN_LENGTHS)
        tokens = np.full(length, v.eot, np.int32)
        tokens[: len(sequence)] = sequence
        probs, weights = self._compiled.get(("align", length), self._jitted["align"])(
            self._params, self._state, np.int32(lane), tokens
        )
        start = len(sot_sequence)
        text_probs = np.asarray(probs)[start : start + len(text)]
        matrix = attention_matrix(np.asarray(weights)[:, : len(sequence)], frames // 2, len(sot_sequence))
        return timed_words(matrix, text_probs, text, v.token_bytes, v.eot, language)

"""`TranscribeTask`: the transcribe task's runner (engine/tasks/task_registry.py) over a Whisper
model, on the CPU device whatever device serves the chat model.

A request's audio is decoded a 30-second window at a time, in order (each window's prompt holds
the text before it, and where it starts depends on where the one before ended). Windows of
different requests share the decoder's lanes: each batch admits waiting windows into free lanes
(one encoder batch for them all, then each one's prompt), then runs a few decode steps over the
lanes in use. A window whose attempt fails is decoded again in its lane at the next temperature (above
0, `best_of` samples one after another, the likeliest kept); a finished one is split into
segments (timed by word with `word_timestamps`), sent, and its lane freed. A request ends with
`Transcribed` after its last window. The log-mel spectrogram of a request's audio (a second or
more for an hour) is computed on a thread of the runner's own, so the engine thread never waits
for it: a request's first window is admitted once its spectrogram is ready.

Threads: `check` runs on handler threads and reads only what never changes; `compile` and
`held_arrays` run on the thread that owns the engine; every other method on the engine thread.
"""

from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

import jax
import numpy as np

from engine.api import SPEECH_SAMPLE_RATE, Transcribed, TranscriptionRequest
from engine.device.runner_api import Report
from engine.model.families.whisper import LoadedWhisper, log_mel
from engine.stats import HeldArrays
from engine.tasks.task_registry import Done, TaskJob, send
from engine.tasks.transcribe.lane_programs import window_mel
from engine.tasks.transcribe.segmenting import chosen_attempt, max_new_tokens
from engine.tasks.transcribe.speech_check import check_transcription
from engine.tasks.transcribe.transcription import Transcription, Window
from engine.tasks.transcribe.whisper_lanes import Lane, WhisperLanes
from engine.tasks.transcribe.word_timestamps import TimedPiece, place_words, untimed

TRANSCRIBE = "transcribe"
# Seconds a batch with nothing else to do waits for a spectrogram (the engine thread spins otherwise).
MEL_WAIT_S = 0.005


@dataclass(frozen=True)
class SpeechConfig:
    lanes: int = 8  # windows decoded at once (a request's windows go one at a time)
    encoder_batch: int = 4  # the most windows one encoder batch holds
    steps_per_batch: int = 8  # decode steps of the lanes in use in one batch of the engine thread
    best_of: int = 5  # samples an attempt above temperature 0 draws, keeping the likeliest (faster-whisper's)


Sample = tuple[list[int], list[float]]  # a sample's tokens and their log-probabilities (and the end of text's)


def sample_score(sample: Sample) -> float:
    """How CTranslate2 ranks an attempt's samples: the summed log-probability over the tokens."""
    tokens, logprobs = sample
    return sum(logprobs) / max(len(tokens), 1)


class TranscribeTask:
    task = TRANSCRIBE
    request_type = TranscriptionRequest

    def __init__(self, model: LoadedWhisper, config: SpeechConfig) -> None:
        if config.best_of < 1:
            raise ValueError("SpeechConfig.best_of must be at least 1")
        self.model = model
        self.config = config
        self.device = jax.devices("cpu")[0]
        self._lanes = WhisperLanes(model, config.lanes, config.encoder_batch, self.device)
        self._waiting: deque[Transcription] = deque()  # requests whose next window waits for a lane
        self._busy: list[Lane | None] = [None] * config.lanes
        self._spectrograms = ThreadPoolExecutor(1, thread_name_prefix="log-mel")

    def check(self, request: TranscriptionRequest) -> None:
        check_transcription(request, self.model.vocabulary)

    def compile(self, report: Report) -> None:
        self._lanes.compile(report)

    def held_arrays(self) -> HeldArrays:
        return self._lanes.held_arrays()

    @property
    def busy(self) -> bool:
        return bool(self._waiting) or any(lane is not None for lane in self._busy)

    def add(self, job: TaskJob[TranscriptionRequest]) -> None:
        mel = self._spectrograms.submit(log_mel, job.request.audio, self.model.config.n_mels)
        self._waiting.append(Transcription(job, self.model.vocabulary, mel))

    def cancel(self, ids: set[int]) -> list[TaskJob[TranscriptionRequest]]:
        cancelled = [t for t in self._waiting if t.job.id in ids]
        for transcription in cancelled:
            self._waiting.remove(transcription)
            transcription.mel.cancel()
        for index, lane in enumerate(self._busy):
            if lane is not None and lane.transcription.job.id in ids:
                cancelled.append(lane.transcription)
                self._busy[index] = None
        return [t.job for t in cancelled]

    def drop_all(self) -> list[TaskJob[TranscriptionRequest]]:
        for transcription in self._waiting:
            transcription.mel.cancel()
        held = [t.job for t in self._waiting] + [lane.transcription.job for lane in self._busy if lane is not None]
        self._waiting.clear()
        self._busy = [None] * self.config.lanes
        return held

    def run_batch(self) -> list[Done]:
        """Admits waiting windows into free lanes, then decode steps over the lanes in use."""
        done: list[Done] = []
        self._admit(done)
        for _ in range(self.config.steps_per_batch):
            if not any(lane is not None for lane in self._busy):
                break
            self._step(done)
        return done

    # --- admission -------------------------------------------------------------------------

    def _admit(self, done: list[Done]) -> None:
        free = [i for i, lane in enumerate(self._busy) if lane is None]
        if free and self._waiting and all(lane is None for lane in self._busy):
            wait([t.mel for t in self._waiting], MEL_WAIT_S, FIRST_COMPLETED)
        ready = [t for t in self._waiting if t.mel.done()][: min(len(free), self.config.encoder_batch)]
        if not ready:
            return
        admitted = list(zip(free, ready, strict=False))
        windows = []
        for _, transcription in admitted:
            self._waiting.remove(transcription)
            mel = transcription.mel.result()
            windows.append(window_mel(mel, transcription.seek, transcription.window_frames()))
        self._lanes.admit([index for index, _ in admitted], np.stack(windows))
        for index, transcription in admitted:
            if transcription.language is None:
                self._detect_language(index, transcription)
            self._start_attempt(index, transcription, done)

    def _detect_language(self, index: int, transcription: Transcription) -> None:
        """The likeliest language of the request's first window (openai-whisper's detection)."""
        vocabulary = self.model.vocabulary
        drawn = self._lanes.prefill(index, [vocabulary.sot], 0, 0.0, 0)
        best = int(np.argmax(drawn.language_logprobs))
        codes = {token: code for code, token in vocabulary.languages.items()}
        transcription.language = codes[self._lanes.language_ids[best]]
        transcription.language_probability = float(np.exp(drawn.language_logprobs[best]))

    def _start_attempt(
        self, index: int, transcription: Transcription, done: list[Done], samples: list[Sample] | None = None
    ) -> None:
        """Prefills the window's prompt in lane `index` and draws its first token (`samples`: the
        attempt's samples so far, when it draws another)."""
        text_ctx = self.model.config.n_text_ctx
        prompt = transcription.prompt(text_ctx)
        sot_index = prompt.index(self.model.vocabulary.sot)
        temperature = transcription.temperature()
        seed = transcription.attempt_seed()
        drawn = self._lanes.prefill(index, prompt, sot_index, temperature, seed)
        lane = Lane(
            transcription,
            len(prompt),
            temperature,
            seed,
            drawn.no_speech_prob,
            max_new_tokens(len(prompt), text_ctx),
            samples=samples or [],
        )
        self._busy[index] = lane
        self._drew(index, lane, drawn.token, drawn.logprob, done)

    # --- decoding --------------------------------------------------------------------------

    def _step(self, done: list[Done]) -> None:
        tokens, logprobs = self._lanes.step(self._busy)
        for index, lane in enumerate(self._busy):
            if lane is not None:
                self._drew(index, lane, int(tokens[index]), float(logprobs[index]), done)

    def _drew(self, index: int, lane: Lane, token: int, logprob: float, done: list[Done]) -> None:
        """Takes a lane's drawn token; ends its attempt at the end of text or its length limit."""
        eot = self.model.vocabulary.eot
        lane.logprobs.append(logprob)
        if token != eot:
            lane.tokens.append(token)
        if token != eot and len(lane.tokens) < lane.limit:
            return
        transcription = lane.transcription
        tokens, logprobs = lane.tokens, lane.logprobs
        if lane.temperature > 0:
            lane.samples.append((tokens, logprobs))
            if len(lane.samples) < self.config.best_of:
                self._start_attempt(index, transcription, done, lane.samples)
                return
            tokens, logprobs = max(lane.samples, key=sample_score)
        again = transcription.record(tokens, logprobs, lane.temperature, lane.no_speech_prob)
        if again:
            self._start_attempt(index, transcription, done)
            return
        self._busy[index] = None
        window = transcription.conclude(chosen_attempt(transcription.attempts))
        if window is not None:
            for segment in transcription.segments(window, self._placed(index, transcription, window)):
                send(transcription.job, segment)
        if transcription.finished:
            self._finish(transcription, done)
        else:
            self._waiting.append(transcription)

    def _placed(self, index: int, transcription: Transcription, window: Window) -> list[TimedPiece]:
        """The window's segments, timed by word when the request asks."""
        if not transcription.request.word_timestamps:
            return untimed(window.pieces)
        vocabulary = self.model.vocabulary
        text = [t for piece in window.pieces for t in piece.tokens if t < vocabulary.eot]
        assert transcription.language is not None
        alignment = self._lanes.align(index, transcription.sot_sequence(), text, window.frames, transcription.language)
        return place_words(window.pieces, alignment, vocabulary.eot, window.seek, transcription.last_speech)

    def _finish(self, transcription: Transcription, done: list[Done]) -> None:
        request = transcription.request
        assert transcription.language is not None
        duration = len(request.audio) / SPEECH_SAMPLE_RATE
        event = Transcribed(
            transcription.language, transcription.language_probability, duration, transcription.output_tokens
        )
        send(transcription.job, event)
        done.append(Done(transcription.job, len(request.prompt_ids)))

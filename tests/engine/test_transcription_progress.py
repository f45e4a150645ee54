"""A transcription's progress between windows, on the host: the previous text its prompts hold
(reset after a hot window), the segments it keeps and numbers, and where each window starts."""

from concurrent.futures import Future

import numpy as np

from engine.api import TranscriptionRequest
from engine.model.families.whisper import WhisperVocabulary
from engine.tasks.task_registry import TaskJob
from engine.tasks.transcribe.segmenting import Attempt
from engine.tasks.transcribe.transcription import Transcription
from engine.tasks.transcribe.word_timestamps import untimed

EOT, SOT, SOT_PREV, TB = 9, 10, 11, 17
VOCABULARY = WhisperVocabulary(
    eot=EOT,
    sot=SOT,
    sot_prev=SOT_PREV,
    sot_lm=12,
    no_speech=13,
    no_timestamps=14,
    transcribe=15,
    translate=16,
    timestamp_begin=TB,
    languages={},
    suppress_tokens=(),
    begin_suppress=(),
    token_bytes=(b" a", b" b", b" c", b" d", b" e", b" f", b" g", b" h", b" ", *(b"<|x|>",) * 1509),
    alignment_heads=(),
)


def transcription(seconds: float, prompt_ids: tuple[int, ...] = ()) -> Transcription:
    request = TranscriptionRequest(np.zeros(int(16000 * seconds), np.float32), prompt_ids=prompt_ids)
    mel: Future[np.ndarray] = Future()
    return Transcription(TaskJob(1, "transcribe", request, lambda _: None, 0.0), VOCABULARY, mel)


def decoded(tokens: list[int], temperature: float = 0.0, no_speech: float = 0.1) -> Attempt:
    return Attempt(tuple(tokens), tuple([-0.1] * (len(tokens) + 1)), temperature, no_speech, 1.0)


def test_prompts_hold_the_previous_text_until_a_hot_window_resets_them() -> None:
    t = transcription(70, prompt_ids=(7,))
    assert t.language == "en" and t.prompt(448) == [SOT_PREV, 7, SOT]
    first = [TB, 0, 1, TB + 500, TB + 500, 2, TB + 1000]
    window = t.conclude(decoded(first))
    assert window is not None
    segments = t.segments(window, untimed(window.pieces))
    assert [(s.index, s.start, s.end, s.tokens) for s in segments] == [(0, 0.0, 10.0, (0, 1)), (1, 10.0, 20.0, (2,))]
    assert t.seek == 3000 and t.prompt(448) == [SOT_PREV, 7, *first, SOT]
    hot = t.conclude(decoded([TB, 3, TB + 100], temperature=0.6))
    assert hot is not None
    assert [s.index for s in t.segments(hot, untimed(hot.pieces))] == [2]
    assert t.prompt(448) == [SOT]
    assert t.output_tokens == 4


def test_a_silent_window_is_skipped_and_empty_segments_are_not_sent() -> None:
    t = transcription(45)
    assert t.conclude(Attempt((TB, 0, TB + 10), (-2.0,) * 4, 0.0, 0.9, 1.0)) is None
    assert t.seek == 3000 and t.window_frames() == 1500
    window = t.conclude(decoded([TB, 8, TB + 50, TB + 50, 4, TB + 80]))  # a blank, then " e"
    assert window is not None
    segments = t.segments(window, untimed(window.pieces))
    assert [(s.index, s.start, s.end, s.tokens) for s in segments] == [(0, 31.0, 31.6, (4,))]
    assert t.finished


def test_a_window_that_ends_at_its_start_still_moves_on() -> None:
    t = transcription(60)
    window = t.conclude(decoded([TB, TB, 3, 4]))
    assert window is not None and window.next_seek == 0
    t.segments(window, untimed(window.pieces))
    assert t.seek == 3000

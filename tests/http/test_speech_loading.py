"""The speech model beside the model (pooled/hosting/speech_loading.py): none without
--speech-model, and one that does not load is a failed part naming its setting, path and reason,
never the whole load's failure."""

from __future__ import annotations

from pathlib import Path

from pooled.configuration.settings import Settings
from pooled.hosting.speech_loading import BesideSpeech, load_speech


def test_without_a_speech_model_there_is_nothing_beside() -> None:
    assert load_speech(Settings(), lambda stage, done, total: None) == BesideSpeech()


def test_a_speech_model_that_does_not_load_is_a_failed_part(tmp_path: Path) -> None:
    broken = tmp_path / "whisper"
    broken.mkdir()
    (broken / "config.json").write_text("not json")
    stages: list[str] = []
    beside = load_speech(Settings(speech_model=str(broken)), lambda stage, done, total: stages.append(stage))
    assert beside.runner is None and beside.face is None
    (failed,) = beside.failed
    assert (failed.kind, failed.setting, failed.path) == ("speech", "speech_model", str(broken))
    assert failed.reason
    assert stages == [f"loading --speech-model {broken}"]

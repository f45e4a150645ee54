"""The transcribe task: speech to text by a Whisper model (`transcribe_task.py`'s runner), decoded
as faster-whisper and openai-whisper decode it (`segmenting.py`, `logit_rules.py`, word timing in
`word_alignment.py` and `word_timestamps.py`), on device programs over decoder lanes
(`lane_programs.py`, `whisper_lanes.py`)."""

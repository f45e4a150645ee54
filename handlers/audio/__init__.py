"""The speech routes (`/v1/audio/transcriptions`, `/v1/audio/translations`): the upload's form and
audio, the request to the engine's speech model, and its answer in every response format."""

"""Encoders: embedding and rerank models (and a decoder's embedding pass), their inputs and their share
of the engine thread."""

"""Errors the engine raises to its callers that are not about one request (those are in engine/api.py)."""


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message is one line meant for the user."""

"""Errors raised while reading checkpoints."""


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message is one line meant for the user."""

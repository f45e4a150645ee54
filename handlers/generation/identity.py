"""An answer's id, creation time and model, the same on every chunk of its stream."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class AnswerIdentity:
    id: str
    created: int  # Unix seconds
    model: str

    @classmethod
    def new(cls, prefix: str, model: str) -> AnswerIdentity:
        """`prefix` is the API's id prefix (`chatcmpl-`, `cmpl-`, `resp_`, `msg_`)."""
        return cls(prefix + secrets.token_hex(12), int(time.time()), model)

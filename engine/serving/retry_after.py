"""The Retry-After estimate for a refused request: when is a lane expected to free?

The oldest request in flight is expected to let go of its lane one average hold time after it got
it. The average moves 1/8 of the way toward each finished request's hold time.
"""

import math

HOLD_SMOOTHING = 1 / 8
# An overdue oldest request has proved the average wrong; expect a lane one average hold from now, capped.
OVERDUE_CAP_S = 15
MARGIN_S = 1
MAX_ESTIMATE_S = 59  # plus the margin: 60, the most the OpenAI SDK honours


def smoothed_hold(average: float | None, hold: float) -> float:
    return hold if average is None else average + (hold - average) * HOLD_SMOOTHING


def retry_after_seconds(now: float, oldest_admitted: float | None, average_hold: float | None) -> int:
    """Whole seconds (2..60; 2..16 once the oldest is overdue; 1 before any request finished)."""
    if average_hold is None:
        return 1
    expected_free = (now if oldest_admitted is None else oldest_admitted) + average_hold
    if expected_free >= now:
        return min(max(math.ceil(expected_free - now), 1), MAX_ESTIMATE_S) + MARGIN_S
    return min(max(math.ceil(average_hold), 1), OVERDUE_CAP_S) + MARGIN_S

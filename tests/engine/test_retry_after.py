"""The Retry-After estimate for a full queue, at its edges."""

from engine.serving.retry_after import retry_after_seconds, smoothed_hold


def test_one_before_any_request_finished() -> None:
    assert retry_after_seconds(now=100.0, oldest_admitted=99.0, average_hold=None) == 1


def test_oldest_plus_average_rounded_up_clamped_plus_margin() -> None:
    assert retry_after_seconds(now=100.0, oldest_admitted=98.0, average_hold=4.2) == 3 + 1  # 2.2 s left → 3
    assert retry_after_seconds(now=100.0, oldest_admitted=100.0, average_hold=0.01) == 1 + 1
    assert retry_after_seconds(now=100.0, oldest_admitted=100.0, average_hold=500.0) == 59 + 1


def test_overdue_oldest_expects_one_average_hold_from_now_at_most_15_s() -> None:
    assert retry_after_seconds(now=100.0, oldest_admitted=10.0, average_hold=6.5) == 7 + 1
    assert retry_after_seconds(now=100.0, oldest_admitted=10.0, average_hold=40.0) == 15 + 1
    assert retry_after_seconds(now=100.0, oldest_admitted=10.0, average_hold=0.2) == 1 + 1


def test_each_finished_request_moves_the_average_an_eighth_of_the_way() -> None:
    assert smoothed_hold(None, 3.0) == 3.0
    assert smoothed_hold(8.0, 16.0) == 9.0

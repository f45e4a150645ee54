"""Byte counts and durations as pooled prints them (`94 MiB`, `1.2 GiB`, `01:05`): the model commands,
the catalog, the host's log."""

KIB = 1 << 10
UNITS = ("KiB", "MiB", "GiB", "TiB")


def human_size(count: float) -> str:
    """Binary units, whole numbers from 10 up (`94 MiB`), one decimal below (`1.5 GiB`)."""
    if count < KIB:
        return f"{count:.0f} B"
    value = float(count)
    for unit in UNITS:
        value /= KIB
        if value < KIB or unit == UNITS[-1]:
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def human_duration(seconds: float | None) -> str:
    """`mm:ss`, `h:mm:ss` past an hour; `?` when not known."""
    if seconds is None:
        return "?"
    minutes, second = divmod(round(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}" if hours else f"{minute:02d}:{second:02d}"

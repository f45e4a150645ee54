"""What `pooled serve` writes to the console (`--log-level`): pooled's own loggers and the HTTP
server's at the level asked for, every other library's from WARNING up unless it is `debug`.

Other libraries' INFO lines are for their own developers: a weights restore alone had orbax log
a dozen through absl (its version, its handlers' options, throughput, metadata stores), and JAX
names each backend it did not find. The load's progress is pooled's own, one line per stage
(pooled/hosting/model_host.py).
"""

from __future__ import annotations

import logging

OWN_LOGGERS = ("pooled", "engine", "handlers", "text")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_console_log(level: str) -> None:
    """`level` is one of debug, info, warning, error (the setting's choices)."""
    logging.basicConfig(level=logging.DEBUG if level == "debug" else logging.WARNING, format=FORMAT)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level.upper())

"""`pooled serve` as one process of a group that serves one model (engine/device/process_group.py).

Process 0 is the server: it opens the listener and its model loads lead the group's (the
loader gets the channel). Every other process follows until the leader says stop or leaves.

Threads: `join_group` and `follow_leader` run on the main thread before anything else; the
leader's `stop_group` on the main thread once the server has stopped and its engine is gone.
"""

from __future__ import annotations

import logging
import os

import jax

from engine.front import Channel, GroupSpec, Lead, Stop, follow, is_leader, join, leave, use_compilation_cache
from pooled.configuration.settings import Settings
from pooled.hosting.loading import follower_model

log = logging.getLogger(__name__)


def group_spec(settings: Settings) -> GroupSpec | None:
    """The group this process joins: --coordinator, JAX_COORDINATOR_ADDRESS or --num-processes
    above 1 (JAX detects the rest on a cluster it knows); None: a process of its own."""
    grouped = settings.coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS") or (settings.num_processes or 1) > 1
    if not grouped:
        return None
    return GroupSpec(
        settings.coordinator, settings.num_processes, settings.process_id, settings.group_heartbeat_timeout
    )


def join_group(spec: GroupSpec) -> Channel:
    join(spec)
    channel = Channel()
    channel.warm()
    return channel


def lead(channel: Channel, settings: Settings) -> Lead:
    """Process 0's side of the group, for its model loads (pooled/hosting/loading.py)."""
    return Lead(channel, settings.group_step_timeout, exit_hung)


def exit_hung(reason: str) -> None:
    """A hung group cannot finish a step, drain or stop: exit 1 for a supervisor to restart it (the
    followers exit once their links to this process close)."""
    log.critical("the process group hung (%s); exiting", reason)
    logging.shutdown()
    os._exit(1)


def follow_leader(channel: Channel) -> int:
    """A follower's whole run: 0 once the leader stopped the group, 1 when the group broke."""
    use_compilation_cache()
    log.info("process %d follows process 0", jax.process_index())
    try:
        follow(channel, follower_model)
    except Exception as error:  # the leader died, or this process could not make a call
        log.error("process %d leaves a broken group: %s", jax.process_index(), error)
        return 1
    leave()
    log.info("process %d stopped with the group", jax.process_index())
    return 0


def stop_group(channel: Channel) -> None:
    """The leader's last word: every follower exits, then the coordinator stops."""
    assert is_leader()
    try:
        channel.send(Stop())
    except jax.errors.JaxRuntimeError as error:
        log.warning("the group was already broken at exit: %s", error)
        return
    leave()

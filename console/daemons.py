"""The record `strata up` keeps of the children it supervises, for the health answer and the
console (no Django here): ``<data_dir>/run/daemons.json``, rewritten atomically whenever a
child starts, exits, is started again or given up::

    {"tgtd": {"state": "running", "pid": 4242, "restarts": 1, "started_at": "...",
              "last_exit": {"code": null, "signal": "SIGKILL", "at": "..."}, "log": "..."}}

``state`` is ``running``, ``restarting`` (it exited; it is started again after a back-off),
``failed`` (it kept exiting at once: `strata up` gave up on it) or ``stopped``.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path

from plumbing.atomic import write_atomic

STATES_FILE = "daemons.json"


def worker_name(port: int) -> str:
    """The node name of `strata up`'s Celery worker: the health check pings this one worker
    and has its answer at once, instead of waiting out a broadcast's timeout for others."""
    return f"strata-{port}@{socket.gethostname()}"


def states_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / "run" / STATES_FILE


def write_states(data_dir: str | Path, states: dict) -> None:
    """Record every child's state (see the module's docstring)."""
    write_atomic(states_path(data_dir), json.dumps(states, indent=1, sort_keys=True) + "\n")


def read_states(data_dir: str | Path) -> dict:
    """The children's states as `strata up` last recorded them ({} when it does not run
    this data directory's daemons, e.g. a plane started by other means)."""
    try:
        return json.loads(states_path(data_dir).read_text())
    except (OSError, ValueError):
        return {}

"""What a service tells `strata up` about the daemons it needs (no Django here).

A service that runs daemons provides `services/<name>/up.py` with:

    def add_arguments(parser): ...            # e.g. parser.add_argument("--s3-port", ...)
    def daemons(data_dir: Path, options: dict) -> list[DaemonSpec]: ...

`strata up` discovers these modules, adds their options to `strata up`, starts their daemons
after the database is migrated and before the plane's bootstrap (which reconciles exports
and shares into the running daemons), supervises them, and stops them in reverse order.
Options reach the Django processes as the JSON environment variable STRATA_SERVICE_OPTIONS
(`settings.SERVICE_OPTIONS`). Keep `up.py` light: it is imported by every `strata` command.
"""
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class DaemonSpec:
    """One long-running child of `strata up`."""

    name: str
    argv: list
    ready: Optional[Callable[[], bool]] = None      # polled until True (start timeout 60 s)
    stop: Optional[Callable[[subprocess.Popen], None]] = None  # default: SIGTERM
    env: dict = field(default_factory=dict)          # added to the environment

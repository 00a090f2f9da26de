"""What the vector service adds to `strata up`: ``--vector-memory`` (no daemons).

Collections are served inside the web server process (see vector/registry.py), so there is
nothing to start; the option reaches Django as ``settings.SERVICE_OPTIONS["vector_memory_bytes"]``.
Light imports only; no Django. NOTE: `console/supervisor.py` discovers ``services/*/up.py``
only; the lead adds ``vector/up.py`` to that discovery.
"""
from __future__ import annotations

import argparse


def _size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    num, unit = (t[:-1], t[-1]) if t and not t[-1].isdigit() else (t, "")
    try:
        return int(float(num) * units[unit])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 8G, 512M)") from None


def add_arguments(parser) -> None:
    """``--vector-memory`` (default: half of the machine's memory)."""
    parser.add_argument("--vector-memory", dest="vector_memory_bytes", type=_size, default=None,
                        help="memory budget for all vector collections, e.g. 8G (default: half "
                             "of physical memory); collections that would not fit are refused")


def daemons(data_dir, options: dict) -> list:
    """None: the web server serves the collections."""
    return []

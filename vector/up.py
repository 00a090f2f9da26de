"""What the vector service adds to `strata up`: ``--vector-memory`` (no daemons).

Collections are served inside the web server process (see vector/registry.py), so there is
nothing to start; the option reaches Django as ``settings.SERVICE_OPTIONS["vector_memory_bytes"]``.
Light imports only; no Django. NOTE: `console/supervisor.py` discovers ``services/*/up.py``
only; the lead adds ``vector/up.py`` to that discovery.
"""
from __future__ import annotations

import argparse

from plumbing import sizes
from plumbing.errors import Invalid


def _size(text: str) -> int:
    try:
        return sizes.parse_size(text)
    except Invalid as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_arguments(parser) -> None:
    """``--vector-memory`` (default: half of the machine's memory)."""
    parser.add_argument("--vector-memory", dest="vector_memory_bytes", type=_size, default=None,
                        help="memory budget for all vector collections, e.g. 8G (default: half "
                             "of physical memory); collections that would not fit are refused")


def daemons(data_dir, options: dict) -> list:
    """None: the web server serves the collections."""
    return []

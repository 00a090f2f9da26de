"""One dataplane driver per kind, rooted at the data directory."""
import functools

from django.conf import settings

import dataplane


@functools.lru_cache(maxsize=None)
def _driver(kind: str, state_dir: str) -> "dataplane.Driver":
    return dataplane.open_driver(kind, state_dir)


def driver_for(kind: str) -> "dataplane.Driver":
    """The driver for a pool's `driver` field ("local", "directory")."""
    return _driver(kind, str(settings.DATA_DIR))


def default_driver_kind() -> str:
    """What `auto` resolves to on this machine (local btrfs when it can run)."""
    return _driver(settings.STRATA_DATAPLANE, str(settings.DATA_DIR)).name

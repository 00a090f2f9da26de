"""One dataplane driver per kind, rooted at the data directory."""
import functools

from django.conf import settings

import dataplane
from dataplane.errors import NotFound


@functools.lru_cache(maxsize=None)
def _driver(kind: str, state_dir: str) -> "dataplane.Driver":
    return dataplane.open_driver(kind, state_dir)


def driver_for(kind: str) -> "dataplane.Driver":
    """The driver for a pool's `driver` field ("local", "directory")."""
    return _driver(kind, str(settings.DATA_DIR))


def default_driver_kind() -> str:
    """What `auto` resolves to on this machine (local btrfs when it can run)."""
    return _driver(settings.STRATA_DATAPLANE, str(settings.DATA_DIR)).name


def delete_if_present(drv: "dataplane.Driver", pool: str, kind: str, name: str) -> None:
    """Delete file system (``kind`` "filesystem") or volume ``name`` in ``pool``; one that is
    not there (never made, or gone already) is no error: the clean-up of a copy that failed
    part way (backups, restores, tier moves)."""
    try:
        if kind == "filesystem":
            drv.delete_filesystem(pool, name)
        else:
            drv.delete_volume(pool, name)
    except NotFound:
        pass

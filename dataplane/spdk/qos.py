"""Rate limits of SPDK bdevs (``bdev_set_qos_limit``), for lvol volumes and rbd exports."""

from __future__ import annotations

from ..errors import InvalidArgument

QOS_KEYS = ("rw_ios_per_sec", "rw_mbytes_per_sec", "r_mbytes_per_sec", "w_mbytes_per_sec")


def check_qos_limits(limits: dict) -> dict:
    """``limits`` checked (whole numbers >= 0, IOPS in SPDK's steps of 1000; None = unchanged,
    0 = unlimited) and returned with every key of :data:`QOS_KEYS`."""
    unknown = set(limits) - set(QOS_KEYS)
    if unknown:
        raise InvalidArgument(f"qos: unknown limit {sorted(unknown)[0]!r}")
    out = {key: limits.get(key) for key in QOS_KEYS}
    for key, value in out.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 0):
            raise InvalidArgument(f"{key} must be a whole number >= 0, got {value!r}")
    if out["rw_ios_per_sec"] and out["rw_ios_per_sec"] % 1000:
        raise InvalidArgument(f"SPDK limits IOPS in steps of 1000; {out['rw_ios_per_sec']} is not")
    return out


def assigned_limits(bdev: dict) -> dict:
    """A bdev's limits as ``bdev_get_bdevs`` reports them, every key present (0 = none)."""
    have = bdev.get("assigned_rate_limits", {})
    return {key: int(have.get(key, 0)) for key in QOS_KEYS}

"""The storage core's metrics: I/O counters sampled from the kernel per pool (the console's
charts read them), its Prometheus families, and capacity per pool and tier for the dashboard."""
import os
from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from plane.models import MetricSample
from services.storage.models import FileSystem, Pool, Volume

SECTOR = 512
KEEP = timedelta(hours=2)


def device_counters(path: str) -> list[int] | None:
    """(reads, read sectors, read ms, writes, write sectors, write ms) of a block device."""
    name = os.path.basename(os.path.realpath(path))
    try:
        with open(f"/sys/class/block/{name}/stat") as f:
            v = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return None
    return [v[0], v[2], v[3], v[4], v[6], v[7]]


@shared_task(name="storage.sample_metrics")
def sample_metrics() -> int:
    """Record one sample per pool; drop samples older than two hours."""
    now = timezone.now()
    rows = []
    for pool in Pool.objects.all():
        total = [0] * 6
        for dev in pool.device_status:
            c = device_counters(dev.get("path", ""))
            if c:
                total = [a + b for a, b in zip(total, c)]
        rows.append(MetricSample(time=now, pool=pool.name, reads=total[0],
                                 read_bytes=total[1] * SECTOR, read_ms=total[2],
                                 writes=total[3], write_bytes=total[4] * SECTOR,
                                 write_ms=total[5]))
    MetricSample.objects.bulk_create(rows)
    MetricSample.objects.filter(time__lt=now - KEEP).delete()
    return len(rows)


def prometheus() -> list:
    """(name, type, help, [(labels, value)]) for pools, file systems, volumes and the pools'
    device counters."""
    pools = list(Pool.objects.all())
    fss = list(FileSystem.objects.select_related("pool"))
    out = [
        ("strata_pool_size_bytes", "gauge", "Pool capacity.",
         [({"pool": p.name, "media": p.media}, p.size_bytes) for p in pools]),
        ("strata_pool_used_bytes", "gauge", "Pool space used.",
         [({"pool": p.name, "media": p.media}, p.used_bytes) for p in pools]),
        ("strata_pool_online", "gauge", "1 when the pool is online and not degraded.",
         [({"pool": p.name}, int(p.state == "online")) for p in pools]),
        ("strata_filesystem_used_bytes", "gauge", "File system space used.",
         [({"filesystem": f.name, "pool": f.pool.name}, f.used_bytes) for f in fss]),
        ("strata_filesystem_quota_bytes", "gauge", "File system quota (0 = none).",
         [({"filesystem": f.name, "pool": f.pool.name}, f.quota_bytes or 0) for f in fss]),
        ("strata_volume_size_bytes", "gauge", "Volume size.",
         [({"volume": v.name, "pool": v.pool_id}, v.size_bytes) for v in Volume.objects.all()]),
    ]
    latest = {}
    for s in MetricSample.objects.order_by("time"):
        latest[s.pool] = s
    for field, name, help_ in (
            ("read_bytes", "strata_pool_read_bytes_total", "Bytes read from the pool's devices."),
            ("write_bytes", "strata_pool_written_bytes_total", "Bytes written to the pool's devices."),
            ("reads", "strata_pool_reads_total", "Read operations."),
            ("writes", "strata_pool_writes_total", "Write operations."),
            ("read_ms", "strata_pool_read_time_ms_total", "Time spent reading (for latency)."),
            ("write_ms", "strata_pool_write_time_ms_total", "Time spent writing (for latency).")):
        out.append((name, "counter", help_,
                    [({"pool": p}, getattr(s, field)) for p, s in latest.items()]))
    return out


def capacity() -> dict:
    """The dashboard's pools and its capacity per tier (media class)."""
    pools = list(Pool.objects.all())
    tiers: dict = {}
    for pool in pools:
        t = tiers.setdefault(pool.media, {"media": pool.media, "size_bytes": 0, "used_bytes": 0})
        t["size_bytes"] += pool.size_bytes
        t["used_bytes"] += pool.used_bytes
    return {"pools": pools, "tiers": sorted(tiers.values(), key=lambda t: t["media"])}

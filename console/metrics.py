"""Metrics: I/O counters sampled from the kernel per pool, series for the console's charts,
and the Prometheus text exposition at /metrics."""
import os
from collections import defaultdict
from datetime import timedelta

from celery import shared_task
from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from plane.models import Job, MetricSample

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


@shared_task(name="console.sample_metrics")
def sample_metrics() -> int:
    """Record one sample per pool; drop samples older than two hours."""
    from services.storage.models import Pool

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


def series(minutes: int) -> dict:
    """Rates between consecutive samples, summed over pools: MiB/s and IOPS."""
    since = timezone.now() - timedelta(minutes=minutes)
    by_pool = defaultdict(list)
    for s in MetricSample.objects.filter(time__gte=since):
        by_pool[s.pool].append(s)
    rates = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for samples in by_pool.values():
        for a, b in zip(samples, samples[1:]):
            dt = (b.time - a.time).total_seconds()
            if dt <= 0 or b.read_bytes < a.read_bytes:  # counters reset (device re-attached)
                continue
            r = rates[round(b.time.timestamp())]
            r[0] += (b.read_bytes - a.read_bytes) / dt / 2**20
            r[1] += (b.write_bytes - a.write_bytes) / dt / 2**20
            r[2] += (b.reads - a.reads) / dt
            r[3] += (b.writes - a.writes) / dt
    times = sorted(rates)
    pts = lambda i: [[t, round(rates[t][i], 3)] for t in times]  # noqa: E731
    return {"throughput": [{"name": "read", "points": pts(0)}, {"name": "write", "points": pts(1)}],
            "iops": [{"name": "read", "points": pts(2)}, {"name": "write", "points": pts(3)}]}


class MetricLineSerializer(serializers.Serializer):
    """One line of a chart: "read" or "write", points as [unix time (s), value] pairs."""

    name = serializers.CharField()
    points = serializers.ListField(child=serializers.ListField(
        child=serializers.FloatField(), min_length=2, max_length=2))


class MetricSeriesSerializer(serializers.Serializer):
    """What `series()` returns (schema only)."""

    throughput = MetricLineSerializer(many=True, help_text="MiB/s, summed over pools.")
    iops = MetricLineSerializer(many=True, help_text="Operations/s, summed over pools.")


@extend_schema(
    parameters=[OpenApiParameter("minutes", int, description="1..120, default 60.")],
    responses=MetricSeriesSerializer)
@api_view(["GET"])
def metric_series(request):
    """Read/write MiB/s and IOPS over the last `minutes` (default 60) for the charts."""
    try:
        minutes = max(1, min(120, int(request.query_params.get("minutes", 60))))
    except ValueError:
        minutes = 60
    return Response(series(minutes))


def _line(name, value, **labels) -> str:
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{lab}}} {value}" if lab else f"{name} {value}"


def exposition() -> str:
    from services.storage.models import FileSystem, Pool, Volume

    out = []

    def metric(name, kind, help_, samples):
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(_line(name, v, **lab) for lab, v in samples)

    pools = list(Pool.objects.all())
    metric("strata_pool_size_bytes", "gauge", "Pool capacity.",
           [({"pool": p.name, "media": p.media}, p.size_bytes) for p in pools])
    metric("strata_pool_used_bytes", "gauge", "Pool space used.",
           [({"pool": p.name, "media": p.media}, p.used_bytes) for p in pools])
    metric("strata_pool_online", "gauge", "1 when the pool is online and not degraded.",
           [({"pool": p.name}, int(p.state == "online")) for p in pools])
    fss = list(FileSystem.objects.select_related("pool"))
    metric("strata_filesystem_used_bytes", "gauge", "File system space used.",
           [({"filesystem": f.name, "pool": f.pool.name}, f.used_bytes) for f in fss])
    metric("strata_filesystem_quota_bytes", "gauge", "File system quota (0 = none).",
           [({"filesystem": f.name, "pool": f.pool.name}, f.quota_bytes or 0) for f in fss])
    metric("strata_volume_size_bytes", "gauge", "Volume size.",
           [({"volume": v.name, "pool": v.pool_id}, v.size_bytes)
            for v in Volume.objects.all()])
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
        metric(name, "counter", help_, [({"pool": p}, getattr(s, field)) for p, s in latest.items()])
    counts = dict(Job.objects.values_list("state").annotate(n=Count("id")))
    metric("strata_jobs", "gauge", "Jobs by state.",
           [({"state": st}, counts.get(st, 0)) for st in Job.State.values])
    return "\n".join(out) + "\n"


@extend_schema(responses={(200, "text/plain"): OpenApiResponse(
    OpenApiTypes.STR, description="Prometheus text exposition format 0.0.4.")})
@api_view(["GET"])
@permission_classes([AllowAny])
def prometheus(request):
    """Prometheus text exposition (no secrets; no auth, like most exporters)."""
    return HttpResponse(exposition(), content_type="text/plain; version=0.0.4")

"""Metrics: series for the console's charts from the samples the storage service records,
and the Prometheus text exposition at /metrics (each service adds its families)."""
from collections import defaultdict
from datetime import timedelta

from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from plane.api.pagination import query_integer
from plane.discovery import service_modules
from plane.models import Job, MetricSample



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
    parameters=[OpenApiParameter("minutes", {"type": "integer", "minimum": 1, "maximum": 120},
                                 description="1..120, default 60.")],
    responses=MetricSeriesSerializer)
@api_view(["GET"])
def metric_series(request):
    """Read/write MiB/s and IOPS over the last `minutes` (default 60) for the charts."""
    return Response(series(query_integer(request, "minutes", 1, 120, 60)))


def _line(name, value, **labels) -> str:
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{lab}}} {value}" if lab else f"{name} {value}"


def exposition() -> str:
    """Each service's `metrics.py` `prometheus()` (a list of (name, type, help, samples)),
    then the jobs by state."""
    families = [f for _app, module in service_modules("metrics")
                if hasattr(module, "prometheus") for f in module.prometheus()]
    counts = dict(Job.objects.values_list("state").annotate(n=Count("id")))
    families.append(("strata_jobs", "gauge", "Jobs by state.",
                     [({"state": st}, counts.get(st, 0)) for st in Job.State.values]))
    out = []
    for name, kind, help_, samples in families:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(_line(name, v, **lab) for lab, v in samples)
    return "\n".join(out) + "\n"


@extend_schema(responses={(200, "text/plain"): OpenApiResponse(
    OpenApiTypes.STR, description="Prometheus text exposition format 0.0.4.")})
@api_view(["GET"])
@permission_classes([AllowAny])
@authentication_classes([])  # public: a stale token sent along is not an error
def prometheus(request):
    """Prometheus text exposition (no secrets; no auth, like most exporters)."""
    return HttpResponse(exposition(), content_type="text/plain; version=0.0.4")

"""Console page of the vector service: collections with their size, memory and index state."""
from plane.pages import Action, Column, FormField, Page
from services.storage.models import Pool
from vector.engine import INDEX_TYPES, METRICS
from vector.models import VectorCollection


def pool_names() -> list[str]:
    return list(Pool.objects.values_list("name", flat=True))


PAGES = [
    Page(slug="vector-collections", title="Vector collections", group="Vector",
         api="/api/v1/vector-collections/",
         queryset=lambda: VectorCollection.objects.select_related("pool"),
         help="Faiss collections: upserts are durable (write-ahead log on the pool) before "
              "they are acknowledged. Train IVF indexes and rebuild HNSW ones with Build.",
         columns=[Column("name", "Name"), Column("pool.name", "Pool"),
                  Column("dimension", "Dim"), Column("metric", "Metric"),
                  Column("index_type", "Index"), Column("index_state", "Index state", "state"),
                  Column("vector_count", "Vectors"),
                  Column("memory_bytes", "Memory", "bytes"),
                  Column("updated_at", "Updated", "time")],
         form=[FormField("name", "Name", required=True),
               FormField("dimension", "Dimension", "number", required=True),
               FormField("metric", "Metric", "select", choices=list(METRICS), default="l2"),
               FormField("index_type", "Index type", "select", choices=list(INDEX_TYPES),
                         default="flat"),
               FormField("params", "Index parameters (JSON)",
                         help='e.g. {"nlist": 1024} (IVF) or {"M": 32, "efConstruction": 100} '
                              "(HNSW); empty for defaults."),
               FormField("pool", "Pool", "select", choices=pool_names,
                         help="Default: the pool named default."),
               FormField("expected_count", "Expected vectors", "number",
                         help="Refused now if this many would not fit in memory.")],
         actions=[Action("Build index", "/api/v1/vector-collections/{key}/build/",
                         watch_job=True),
                  Action("Snapshot", "/api/v1/vector-collections/{key}/snapshots/",
                         fields=[FormField("name", "Snapshot name", required=True)])]),
]

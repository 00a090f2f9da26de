"""What a collection is: dimension, metric, index type and parameters, and what it costs.

This module validates a collection's definition, builds the faiss index for it and
estimates its memory. It holds no data.
"""

import math
import re
from dataclasses import dataclass, field

import faiss

from .errors import InvalidInput, InvalidName, InvalidParams, UnknownIndexType, UnknownMetric

METRICS = ("l2", "ip", "cosine")
INDEX_TYPES = ("flat", "ivf_flat", "ivf_pq", "hnsw")
MAX_DIMENSION = 65536
MAX_K = 10_000
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

# Build-time parameters per index type, with defaults (None: chosen when the index is trained).
INDEX_PARAMS = {
    "flat": {},
    "ivf_flat": {"nlist": None, "nprobe": 16},
    "ivf_pq": {"nlist": None, "m": None, "nbits": 8, "nprobe": 16},
    "hnsw": {"M": 32, "efConstruction": 100, "efSearch": 64},
}
# Per-query parameters each index type accepts.
SEARCH_PARAMS = {
    "flat": (),
    "ivf_flat": ("nprobe",),
    "ivf_pq": ("nprobe",),
    "hnsw": ("ef_search",),
}
_RANGES = {
    "nlist": (1, 1 << 20),
    "nprobe": (1, 1 << 20),
    "m": (1, 4096),
    "nbits": (1, 16),
    "M": (2, 256),
    "efConstruction": (1, 1 << 16),
    "efSearch": (1, 1 << 16),
    "ef_search": (1, 1 << 16),
}


def check_int_param(name, value):
    """Return ``value`` if it is an int within the allowed range of parameter ``name``."""
    lo, hi = _RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"parameter {name!r} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidParams(f"parameter {name!r} must be between {lo} and {hi}, got {value}")
    return value


def validate_name(name):
    """Return ``name`` if it is a valid collection name (lowercase letters, digits, - and _)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidName(
            f"collection name {name!r} is invalid: use 1-63 lowercase letters, digits, '-' or '_',"
            " starting with a letter or digit")
    return name


def validate_params(index_type, dimension, params):
    """Check ``params`` for ``index_type`` and return them merged over the defaults."""
    if index_type not in INDEX_TYPES:
        raise UnknownIndexType(
            f"unknown index type {index_type!r}: choose one of {', '.join(INDEX_TYPES)}")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParams(f"params must be an object, got {type(params).__name__}")
    defaults = INDEX_PARAMS[index_type]
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        allowed = ", ".join(defaults) or "none"
        raise InvalidParams(
            f"unknown parameter(s) {', '.join(unknown)} for index type {index_type!r}"
            f" (allowed: {allowed})")
    merged = dict(defaults)
    for key, value in params.items():
        if value is None and defaults[key] is None:
            continue
        merged[key] = check_int_param(key, value)
    if index_type == "ivf_pq":
        m = merged["m"]
        if m is not None and dimension % m:
            raise InvalidParams(
                f"ivf_pq parameter m={m} must divide the dimension {dimension}")
    return merged


def default_pq_m(dimension):
    """Pick a PQ sub-quantizer count: the largest divisor of ``dimension`` up to dimension/4."""
    target = max(1, dimension // 4)
    for m in range(min(target, 64), 0, -1):
        if dimension % m == 0:
            return m
    return 1


def default_nlist(count):
    """Pick an IVF list count for ``count`` vectors: about 4*sqrt(n), with 39+ points per list."""
    if count <= 0:
        return 1
    return int(max(1, min(4 * math.sqrt(count), count // 39 or 1, 65536)))


@dataclass
class CollectionSpec:
    """The definition of a collection; ``params`` are the merged build parameters."""

    name: str
    dimension: int
    metric: str = "l2"
    index_type: str = "flat"
    params: dict = field(default_factory=dict)

    @classmethod
    def make(cls, name, dimension, metric="l2", index_type="flat", params=None):
        """Validate every field and return a spec; raises the matching InvalidInput subclass."""
        validate_name(name)
        if isinstance(dimension, bool) or not isinstance(dimension, int):
            raise InvalidInput(f"dimension must be an integer, got {dimension!r}")
        if not 1 <= dimension <= MAX_DIMENSION:
            raise InvalidInput(f"dimension must be between 1 and {MAX_DIMENSION}, got {dimension}")
        if metric not in METRICS:
            raise UnknownMetric(f"unknown metric {metric!r}: choose one of {', '.join(METRICS)}")
        merged = validate_params(index_type, dimension, params)
        return cls(name, dimension, metric, index_type, merged)

    def to_json(self):
        """Return the spec as a JSON-able dict."""
        return {"name": self.name, "dimension": self.dimension, "metric": self.metric,
                "index_type": self.index_type, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data):
        """Rebuild a spec from :meth:`to_json` output, validating it again."""
        spec = cls.make(data["name"], data["dimension"], data["metric"], data["index_type"],
                        {k: v for k, v in data["params"].items() if v is not None})
        return spec

    @property
    def faiss_metric(self):
        """The faiss metric constant.

        Cosine is served as L2 over unit vectors (same ranking, and IVF-PQ's residual codes
        quantize L2 much better than inner product); scores are converted back to cosine.
        """
        return faiss.METRIC_INNER_PRODUCT if self.metric == "ip" else faiss.METRIC_L2

    @property
    def needs_training(self):
        """True for index types that must be trained on data before they serve (IVF)."""
        return self.index_type in ("ivf_flat", "ivf_pq")


def new_flat_index(spec):
    """An exact index with external labels: used by ``flat`` and by untrained IVF collections."""
    return faiss.IndexIDMap(faiss.IndexFlat(spec.dimension, spec.faiss_metric))


def new_hnsw_index(spec):
    """An empty HNSW graph with external labels, using the spec's M/efConstruction/efSearch."""
    p = spec.params
    inner = faiss.IndexHNSWFlat(spec.dimension, p["M"], spec.faiss_metric)
    inner.hnsw.efConstruction = p["efConstruction"]
    inner.hnsw.efSearch = p["efSearch"]
    return faiss.IndexIDMap(inner)


def new_ivf_index(spec, count):
    """An untrained IVF index sized for ``count`` vectors; returns (index, resolved params)."""
    p = dict(spec.params)
    d = spec.dimension
    nlist = p["nlist"] or default_nlist(count)
    quantizer = faiss.IndexFlat(d, spec.faiss_metric)
    if spec.index_type == "ivf_flat":
        index = faiss.IndexIVFFlat(quantizer, d, nlist, spec.faiss_metric)
    else:
        m = p["m"] or default_pq_m(d)
        index = faiss.IndexIVFPQ(quantizer, d, nlist, m, p["nbits"], spec.faiss_metric)
        p["m"] = m
    index.nprobe = min(p["nprobe"], nlist)
    p["nlist"] = nlist
    return index, p


def new_index(spec):
    """The index a fresh collection serves from: exact flat until an IVF index is trained."""
    if spec.index_type == "hnsw":
        return new_hnsw_index(spec)
    return new_flat_index(spec)


def estimate_memory(dimension, count, index_type, params=None, metric="l2"):
    """Estimate the resident bytes of a collection of ``count`` vectors.

    Counts the raw float32 copy the engine always keeps (for get-by-id, rebuilds and exact
    filtered search), the faiss index structures and the id bookkeeping, but not metadata
    (reported separately by :meth:`Collection.memory_bytes`).
    """
    spec = CollectionSpec.make("estimate", dimension, metric, index_type, params)
    p = spec.params
    d, n = dimension, max(0, int(count))
    raw = n * d * 4
    ids = n * 120  # id map, id object, slot arrays (measured order of magnitude)
    if index_type == "flat":
        index = n * (d * 4 + 8)
    elif index_type == "hnsw":
        # level 0 has 2*M links; upper levels add about 1/(M-1) of that again.
        links = n * 2 * p["M"] * 4 * (1 + 1 / max(1, p["M"] - 1))
        index = int(n * (d * 4 + 8 + 8) + links)
    else:
        nlist = p["nlist"] or default_nlist(n)
        coarse = nlist * d * 4 + nlist * 48
        if index_type == "ivf_flat":
            index = n * (d * 4 + 8) + coarse
        else:
            m = p["m"] or default_pq_m(d)
            code = math.ceil(m * p["nbits"] / 8)
            index = n * (code + 8) + coarse + (1 << p["nbits"]) * d * 4
    return int(raw + ids + index)


def index_memory(index, kind, params):
    """Approximate bytes held by a built faiss ``index`` of ``kind`` (flat, ivf, hnsw)."""
    n, d = index.ntotal, index.d
    if kind == "flat":
        return n * (d * 4 + 8)
    if kind == "hnsw":
        m = params["M"]
        return int(n * (d * 4 + 16) + n * 2 * m * 4 * (1 + 1 / max(1, m - 1)))
    ivf = faiss.extract_index_ivf(index)
    return int(n * (ivf.code_size + 8 + 16) + ivf.nlist * (d * 4 + 48))

"""Turning caller input (REST JSON or numpy) into checked arrays, ids and metadata."""

import json
import math

import numpy as np

from .errors import (DimensionMismatch, InvalidId, InvalidInput, InvalidK, InvalidMetadata,
                     InvalidParams, InvalidValues)
from .spec import MAX_K, SEARCH_PARAMS, check_int_param

MAX_ID_LENGTH = 512
MAX_BATCH_BYTES = 256 << 20
MAX_METADATA_BYTES = 64 << 10


def check_id(vid):
    """Return ``vid`` if it is a usable vector id (non-empty string or integer)."""
    if isinstance(vid, bool) or not isinstance(vid, (str, int)):
        raise InvalidId(f"vector id must be a string or an integer, got {vid!r}")
    if isinstance(vid, str) and not 0 < len(vid) <= MAX_ID_LENGTH:
        raise InvalidId(f"vector id strings must be 1-{MAX_ID_LENGTH} characters long")
    if isinstance(vid, int) and not -(1 << 63) <= vid < (1 << 63):
        raise InvalidId(f"integer vector ids must fit in 64 bits, got {vid}")
    return vid


def check_ids(ids, unique=True):
    """Validate a list of ids; with ``unique``, a repeated id is an error."""
    if not isinstance(ids, (list, tuple)):
        raise InvalidId("ids must be a list")
    ids = [check_id(v) for v in ids]
    if unique and len(set(ids)) != len(ids):
        seen = set()
        dup = next(v for v in ids if v in seen or seen.add(v))
        raise InvalidId(f"vector id {dup!r} appears more than once in the batch")
    return ids


def check_metadata(meta):
    """Return (metadata, its JSON length); metadata must be a JSON object or None."""
    if meta is None:
        return None, 0
    if not isinstance(meta, dict):
        raise InvalidMetadata(f"metadata must be a JSON object, got {type(meta).__name__}")
    try:
        text = json.dumps(meta, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidMetadata(f"metadata is not valid JSON: {exc}") from None
    if len(text) > MAX_METADATA_BYTES:
        raise InvalidMetadata(f"metadata is {len(text)} bytes; the limit is {MAX_METADATA_BYTES}")
    if not all(isinstance(k, str) and k for k in meta):
        raise InvalidMetadata("metadata field names must be non-empty strings")
    # Store a JSON round-trip: the caller's object may change later, ours must not.
    return json.loads(text), len(text)


def check_matrix(values, dimension, normalize, what="vector"):
    """Return a C-contiguous float32 (n, dimension) array of finite values.

    Accepts one vector or a list of vectors (lists or numpy). With ``normalize`` (cosine
    metric) rows are scaled to unit length and a zero row is an error.
    """
    if isinstance(values, (list, tuple)) and values and \
            isinstance(values[0], (list, tuple, np.ndarray)):
        for row, v in enumerate(values):
            if hasattr(v, "__len__") and len(v) != dimension:
                raise DimensionMismatch(f"{what} #{row} has dimension {len(v)}, but the"
                                        f" collection's dimension is {dimension}")
    if isinstance(values, np.ndarray) and values.dtype == np.float32:
        mat = values   # fast path for numpy callers; copied below only if normalized
    else:
        try:
            mat = np.array(values, dtype=np.float32)
        except (ValueError, TypeError):
            raise InvalidInput(f"{what} values must be lists of {dimension} numbers of equal"
                               " length") from None
    if mat.ndim == 1:
        mat = mat.reshape(1, -1)
    if mat.ndim != 2:
        raise InvalidInput(f"{what} values must be a list of numbers or a list of such lists")
    if mat.shape[1] != dimension:
        raise DimensionMismatch(
            f"{what} has dimension {mat.shape[1]}, but the collection's dimension is {dimension}")
    finite = np.isfinite(mat).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise InvalidValues(f"{what} #{row} contains NaN or infinite values (or a value too large"
                            " for float32)")
    if normalize:
        norms = np.linalg.norm(mat, axis=1)
        if (norms == 0).any():
            row = int(np.flatnonzero(norms == 0)[0])
            raise InvalidValues(f"{what} #{row} is all zeros; cosine similarity needs a non-zero"
                                " vector")
        mat = mat / norms[:, None]
    if mat.nbytes > MAX_BATCH_BYTES:
        raise InvalidInput(f"batch of {mat.nbytes} bytes is too large; split it into batches of"
                           f" at most {MAX_BATCH_BYTES} bytes")
    return np.ascontiguousarray(mat, np.float32)


def check_k(k):
    """Return ``k`` if it is an integer in 1..MAX_K."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InvalidK(f"k must be an integer, got {k!r}")
    if not 1 <= k <= MAX_K:
        raise InvalidK(f"k must be between 1 and {MAX_K}, got {k}")
    return int(k)


def check_search_params(index_type, nprobe, ef_search):
    """Validate per-query parameters for ``index_type``; returns (nprobe, ef_search)."""
    allowed = SEARCH_PARAMS[index_type]
    for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
        if value is None:
            continue
        if name not in allowed:
            raise InvalidParams(
                f"search parameter {name!r} does not apply to a {index_type} index"
                + (f" (it accepts: {', '.join(allowed)})" if allowed else ""))
        check_int_param(name, value)
    return nprobe, ef_search


def check_items(items, dimension, normalize):
    """Split REST-style items [{id, values, metadata}] into (ids, matrix, metas, meta_lens)."""
    if not isinstance(items, (list, tuple)) or not items:
        raise InvalidInput("vectors must be a non-empty list of {id, values, metadata} objects")
    ids, rows, metas, lens = [], [], [], []
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidInput(f"vector #{n} must be an object with id, values, metadata")
        extra = set(item) - {"id", "values", "metadata"}
        if extra:
            raise InvalidInput(f"vector #{n} has unknown field(s) {', '.join(sorted(extra))}")
        if "id" not in item or "values" not in item:
            raise InvalidInput(f"vector #{n} needs an 'id' and 'values'")
        ids.append(item["id"])
        values = item["values"]
        if not isinstance(values, (list, tuple, np.ndarray)):
            raise InvalidInput(f"vector #{n} values must be a list of numbers")
        if len(values) != dimension:
            raise DimensionMismatch(
                f"vector #{n} has dimension {len(values)}, but the collection's dimension is"
                f" {dimension}")
        rows.append(values)
        meta, length = check_metadata(item.get("metadata"))
        metas.append(meta)
        lens.append(length)
    ids = check_ids(ids)
    return ids, check_matrix(rows, dimension, normalize), metas, lens


def is_finite_number(x):
    """True for an int or finite float (not bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

"""Encoding of write-ahead log records: upserts (ids, metadata, float32 rows) and deletes."""

import json
import struct

import numpy as np

from .errors import CorruptCollection

UPSERT = b"U"
DELETE = b"D"
_LEN = struct.Struct("<I")


def encode_upsert(ids, vectors, metadata):
    """Record for an upsert batch: ids and metadata as JSON, then the raw float32 rows."""
    head = json.dumps({"ids": ids, "meta": metadata}, separators=(",", ":")).encode()
    return UPSERT + _LEN.pack(len(head)) + head + np.ascontiguousarray(vectors, "<f4").tobytes()


def encode_delete(ids):
    """Record for a delete batch."""
    head = json.dumps({"ids": ids}, separators=(",", ":")).encode()
    return DELETE + _LEN.pack(len(head)) + head


def decode(payload, dimension):
    """Return ("upsert", ids, vectors, metadata) or ("delete", ids, None, None)."""
    op = payload[:1]
    (hlen,) = _LEN.unpack_from(payload, 1)
    head = json.loads(payload[5:5 + hlen])
    if op == DELETE:
        return "delete", head["ids"], None, None
    if op != UPSERT:
        raise CorruptCollection(f"unknown write-ahead log record type {op!r}")
    vecs = np.frombuffer(payload, dtype="<f4", offset=5 + hlen).reshape(-1, dimension)
    return "upsert", head["ids"], vecs, head["meta"]

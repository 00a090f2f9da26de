"""The checkpoint file: a collection's whole state at one write-ahead log position.

Layout: ``STRATAVC1\\n``, a little-endian u64 header length, a JSON header, then sections
(entries JSON, float32 vectors, serialized faiss index) whose offsets, lengths and CRCs the
header lists. Written to a temporary name, fsynced, then renamed over ``checkpoint.bin``.
"""

import json
import os
import struct
import zlib

import faiss
import numpy as np

from plumbing.atomic import fsync_dir

from .errors import CorruptCollection

MAGIC = b"STRATAVC1\n"
FILENAME = "checkpoint.bin"
_U64 = struct.Struct("<Q")


def write_checkpoint(directory, header, entries, vectors, index_bytes):
    """Atomically write a checkpoint into ``directory``; returns its size in bytes.

    ``entries`` is a list of [slot, id, metadata] for live vectors, ``vectors`` their rows in
    the same order, ``index_bytes`` the output of ``faiss.serialize_index``.
    """
    sections = [("entries", json.dumps(entries, separators=(",", ":")).encode()),
                ("vectors", np.ascontiguousarray(vectors, "<f4").tobytes()),
                ("index", memoryview(index_bytes))]
    offset = 0
    table = []
    for name, blob in sections:
        table.append({"name": name, "offset": offset, "length": len(blob),
                      "crc": zlib.crc32(blob)})
        offset += len(blob)
    head = json.dumps(dict(header, sections=table)).encode()
    tmp = os.path.join(directory, FILENAME + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + _U64.pack(len(head)) + head)
        for _, blob in sections:
            f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, FILENAME))
    fsync_dir(directory)
    return len(MAGIC) + 8 + len(head) + offset


def read_checkpoint(directory):
    """Return (header, entries, vectors, index) or None when there is no checkpoint yet."""
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(MAGIC):
        raise CorruptCollection(f"{path} is not a Strata vector checkpoint")
    (hlen,) = _U64.unpack_from(data, len(MAGIC))
    base = len(MAGIC) + 8
    header = json.loads(data[base:base + hlen])
    base += hlen
    blobs = {}
    for sec in header["sections"]:
        start = base + sec["offset"]
        blob = memoryview(data)[start:start + sec["length"]]
        if len(blob) != sec["length"] or zlib.crc32(blob) != sec["crc"]:
            raise CorruptCollection(
                f"checkpoint {path} section {sec['name']!r} is damaged; restore from a snapshot")
        blobs[sec["name"]] = blob
    entries = json.loads(bytes(blobs["entries"]))
    vectors = np.frombuffer(blobs["vectors"], dtype="<f4").reshape(len(entries), -1) \
        if entries else None
    index = faiss.deserialize_index(np.frombuffer(blobs["index"], dtype=np.uint8))
    return header, entries, vectors, index

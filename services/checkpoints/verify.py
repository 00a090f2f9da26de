"""Check a checkpoint's shards on disk against a manifest (no Django: this touches bytes).

A manifest is a list of `{"name", "size", "sha256"?, "crc32c"?}`; `name` is a path relative
to the version's directory. `check_manifest` returns one `ShardProblem` per bad shard so that
a refusal can name every one of them; an empty list means the set is complete.
"""
import base64
import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import crc32c

CHUNK = 1 << 20


class ManifestError(ValueError):
    """The manifest itself is malformed (not a shard problem): a 400 for the caller."""


@dataclass
class ShardProblem:
    """One shard that is missing, short, long or does not match its checksum."""

    name: str
    problem: str  # missing | short | long | sha256_mismatch | crc32c_mismatch | not_a_file
    detail: str

    def as_dict(self) -> dict:
        return {"name": self.name, "problem": self.problem, "detail": self.detail}


def crc32c_update(crc: int, data: bytes) -> int:
    """CRC-32C (Castagnoli) of `data` continuing from `crc` (start with 0)."""
    return crc32c.crc32c(data, crc)


def _normalise_crc32c(value) -> int:
    """Accept an int, 8 hex digits, or base64 of 4 big-endian bytes (the S3 form)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if len(text) == 8:
        try:
            return int(text, 16)
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise ManifestError(f"crc32c {value!r} is neither 8 hex digits nor base64") from exc
    if len(raw) != 4:
        raise ManifestError(f"crc32c {value!r} does not decode to 4 bytes")
    return int.from_bytes(raw, "big")


def validate_manifest(manifest) -> list:
    """Return the manifest as a list of clean dicts, or raise ManifestError saying what is wrong."""
    if not isinstance(manifest, list) or not manifest:
        raise ManifestError("manifest must be a non-empty list of {name, size} entries")
    clean, seen = [], set()
    for i, entry in enumerate(manifest):
        if not isinstance(entry, dict):
            raise ManifestError(f"manifest[{i}] is not an object")
        name, size = entry.get("name"), entry.get("size")
        if not isinstance(name, str) or not name:
            raise ManifestError(f"manifest[{i}] has no name")
        parts = Path(name).parts
        if name.startswith("/") or ".." in parts or "\\" in name:
            raise ManifestError(f"manifest[{i}] name {name!r} must be relative, without '..'")
        if name in seen:
            raise ManifestError(f"shard {name!r} is listed twice")
        seen.add(name)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"shard {name!r}: size must be a non-negative integer")
        item = {"name": name, "size": size}
        if entry.get("sha256") is not None:
            sha = str(entry["sha256"]).lower()
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise ManifestError(f"shard {name!r}: sha256 must be 64 hex digits")
            item["sha256"] = sha
        if entry.get("crc32c") is not None:
            item["crc32c"] = f"{_normalise_crc32c(entry['crc32c']):08x}"
        clean.append(item)
    return clean


def _digest(stream, want_sha: bool, want_crc: bool) -> tuple:
    sha = hashlib.sha256() if want_sha else None
    crc = 0
    with contextlib.closing(stream) as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            if sha is not None:
                sha.update(block)
            if want_crc:
                crc = crc32c_update(crc, block)
    return (sha.hexdigest() if sha else None), f"{crc:08x}"


def check_manifest(source, manifest: list) -> list:
    """Check every shard of a validated manifest in `source` (a `sources.DirectorySource` or
    `sources.S3Source`: anything with `stat(name)` and `open(name)`); return the problems found
    (empty: complete).

    Checksums the store already holds for a shard (S3 additional checksums, verified by the
    gateway on upload) are compared directly; others are computed by reading the shard.
    """
    problems = []
    for entry in manifest:
        name, size = entry["name"], entry["size"]
        try:
            found = source.stat(name)
        except IsADirectoryError:
            problems.append(ShardProblem(name, "not_a_file", f"{name} is not a regular file"))
            continue
        if found is None:
            problems.append(ShardProblem(name, "missing", f"{name} is missing"))
            continue
        actual, stored = found
        if actual != size:
            kind = "short" if actual < size else "long"
            problems.append(ShardProblem(
                name, kind, f"{name} is {actual} bytes, manifest says {size}"))
            continue
        want_sha = "sha256" in entry and "sha256" not in stored
        want_crc = "crc32c" in entry and "crc32c" not in stored
        computed = {}
        if want_sha or want_crc:
            sha, crc = _digest(source.open(name), want_sha, want_crc)
            computed = {"sha256": sha, "crc32c": crc}
        have = {**stored, **{k: v for k, v in computed.items() if v is not None}}
        for algo in ("sha256", "crc32c"):
            if algo in entry and have.get(algo) != entry[algo]:
                problems.append(ShardProblem(
                    name, f"{algo}_mismatch", f"{name} has {algo} {have.get(algo)}, "
                    f"manifest says {entry[algo]}"))
                break
    return problems


def manifest_of_directory(root: str, sha256: bool = False) -> list:
    """A manifest of every regular file under `root` (sorted), with sha256 when asked."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            if not os.path.isfile(full):
                continue
            entry = {"name": os.path.relpath(full, root), "size": os.path.getsize(full)}
            if sha256:
                entry["sha256"] = _digest(open(full, "rb"), True, False)[0]
            out.append(entry)
    return out


def describe(problems: list) -> str:
    """One sentence naming every bad shard, for a 409's detail."""
    return "Checkpoint is incomplete: " + "; ".join(p.detail for p in problems) + "."

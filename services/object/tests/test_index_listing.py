"""Listings across index pages: the merged cursor over a bucket's shards (real SQLite shards)
returns every current key, or every version, once and in order, whatever the page size, the
prefix, or where a listing resumes. The page is made 7 rows (a few hundred rows then cross
many page ends in every shard), and left at its 500, where a listing's first page a shard is
its share of max-keys and the next pages are whole."""
from __future__ import annotations

import itertools

import pytest

from services.object.gateway import index as index_module
from services.object.gateway.bucket_ops import collect
from services.object.gateway.index import BucketIndex, Op, Record

_seqs = itertools.count(1)


def _version(key: str, marker: bool = False) -> Record:
    seq = next(_seqs)
    return Record(key, seq, f"v{seq}", True, marker, 0 if marker else 4, "" if marker else f"etag-{seq}",
                  1.7e9, loc={} if marker else {"seg": 1, "off": seq * 4, "len": 4},
                  meta={} if marker else {"sc": "STANDARD"})


def _put(index: BucketIndex, records: list[Record]) -> None:
    """Put each version into a versioned bucket, one op a transaction (a key's versions land
    in the order given)."""
    for record in records:
        index.shards[index.shard_of(record.key)].apply([Op("put", record, versioned=True)])


@pytest.fixture(params=[7, 500])
def index(request, tmp_path, monkeypatch):
    monkeypatch.setattr(index_module._ShardCursor, "PAGE", request.param)
    ix = BucketIndex(str(tmp_path / "index"), shards=3)
    yield ix
    ix.close()


def _pages(index: BucketIndex, prefix: str, limit: int, delimiter: str = "") -> list[str]:
    """Every key and common prefix a ListObjects of ``prefix`` returns, ``limit`` a request."""
    keys, after = [], ""
    while True:
        records, prefixes, truncated, last = collect(index.iter_current(prefix, after, expect=limit), prefix,
                                                     delimiter, after, limit)
        keys += sorted([r.key for r in records] + prefixes)
        if not truncated:
            return keys
        after = last


def test_current_keys_listed_once_in_order_across_pages(index):
    keys = ([f"a/{i:03d}" for i in range(150)] + [f"a/{i:03d}/sub/{j}" for i in range(40, 60) for j in range(3)]
            + [f"b/{i:03d}" for i in range(60)] + ["c"])
    _put(index, [_version(k) for k in keys])
    deleted = set(keys[5::9])  # a delete marker on top: gone from the current listing
    _put(index, [_version(k, marker=True) for k in sorted(deleted)])
    newer = [_version(k) for k in keys[3::11]]  # one more version: listed once, the newest
    _put(index, newer)
    live = sorted(set(keys) - deleted | {r.key for r in newer})

    assert [r.key for r in index.iter_current()] == live
    # a caller that takes more than it expected (a first page of a few rows) still gets them all
    assert [r.key for r in index.iter_current(expect=1)] == live
    assert [r.key for r in index.iter_current("a/")] == [k for k in live if k.startswith("a/")]
    assert [r.key for r in index.iter_current("", "a/100")] == [k for k in live if k > "a/100"]
    folders = sorted({k[:6] for k in live if k.startswith("a/") and k.count("/") > 1})
    for limit in (1, 6, 7, 50, 1000):
        assert _pages(index, "", limit) == live
        assert _pages(index, "b/", limit) == [k for k in live if k.startswith("b/")]
        # a delimiter folds a/040/sub/... into a/040/ (the cursor jumps past it in every shard)
        assert _pages(index, "", limit, "/") == ["a/", "b/", "c"]
        assert _pages(index, "a/", limit, "/") == sorted(
            [k for k in live if k.startswith("a/") and k.count("/") == 1] + folders)
    seqs = {r.key: r.seq for r in index.iter_current()}
    assert {r.key: seqs[r.key] for r in newer} == {r.key: r.seq for r in newer}


def test_every_version_listed_once_newest_first_and_resumable(index):
    records = []
    for i in range(90):
        key = f"k/{i:03d}"
        records += [_version(key) for _ in range(1 + i % 3)]
        if i % 10 == 0:
            records.append(_version(key, marker=True))
    _put(index, records)
    want = sorted(((r.key, r.seq) for r in records), key=lambda ks: (ks[0], -ks[1]))

    assert [(r.key, r.seq) for r in index.iter_versions()] == want
    assert [(r.key, r.seq) for r in index.iter_versions(expect=1)] == want
    for cut in (0, 6, 7, 100, len(want) - 1):  # resume after (key, seq), as the version-id marker does
        key, seq = want[cut]
        assert [(r.key, r.seq) for r in index.iter_versions("", key, seq)] == want[cut + 1:]
    assert [(r.key, r.seq) for r in index.iter_versions("k/05")] == [ks for ks in want if ks[0].startswith("k/05")]
    for limit in (1, 5, 50):  # pages of ListObjectVersions, each resumed after the last version
        got, after, after_seq = [], "", None
        while True:
            records, _, truncated, _ = collect(index.iter_versions("", after, after_seq, expect=limit), "", "",
                                               after if after_seq is None else "", limit)
            got += [(r.key, r.seq) for r in records]
            if not truncated:
                break
            after, after_seq = records[-1].key, records[-1].seq
        assert got == want

"""REST of /api/v1/vector-collections/: create, upsert, get, delete, search with filters,
bad input, snapshots, memory refusals. Runs on a directory pool (no root needed)."""
import json

import numpy as np
import pytest

from vector.registry import registry

BASE = "/api/v1/vector-collections/"
DIM = 16


@pytest.fixture
def pool(api):
    r = api.post("/api/v1/pools/", {"name": "default", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.content
    yield "default"
    registry.close_all()   # before data_dir goes away: checkpoint threads stop, locks drop


def data(n, dim=DIM, seed=3):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, dim)) * 3
    return (centres[rng.integers(0, 8, n)] + rng.standard_normal((n, dim)) * 0.3).astype(
        np.float32)


def meta(i):
    return {"lang": ["en", "fr", "de"][i % 3], "year": 2000 + i % 25, "tag": f"t{i % 7}"}


def make(api, name="docs", **kw):
    body = {"name": name, "dimension": DIM, "metric": "l2", "index_type": "flat", **kw}
    r = api.post(BASE, body, format="json")
    assert r.status_code == 201, r.content
    return r.json()


def upsert(api, name, vecs, ids=None, batch=500):
    ids = list(range(len(vecs))) if ids is None else ids
    for lo in range(0, len(vecs), batch):
        items = [{"id": ids[i], "values": vecs[i].tolist(), "metadata": meta(i)}
                 for i in range(lo, min(len(vecs), lo + batch))]
        r = api.post(f"{BASE}{name}/vectors/", {"vectors": items}, format="json")
        assert r.status_code == 200, r.content
        assert r.json()["upserted"] == len(items)


def search(api, name, **body):
    return api.post(f"{BASE}{name}/search/", body, format="json")


def brute(vecs, q, k, mask=None):
    d = ((vecs - q) ** 2).sum(1)
    if mask is not None:
        d = np.where(mask, d, np.inf)
    order = np.argsort(d, kind="stable")[:k]
    return [int(i) for i in order if np.isfinite(d[i])]


def test_create_upsert_search_filters_get_delete(api, pool):
    row = make(api)
    assert row["pool"] == "default" and row["filesystem"] == "vector-docs"
    vecs = data(600)
    upsert(api, "docs", vecs)

    # exact search (flat) returns the brute-force top-k, with metadata
    q = vecs[17] + 0.01
    r = search(api, "docs", vector=q.tolist(), k=5)
    assert r.status_code == 200, r.content
    res = r.json()["results"]
    assert [x["id"] for x in res] == brute(vecs, q, 5)
    assert res[0]["id"] == 17 and res[0]["metadata"] == meta(17)

    langs = np.array([meta(i)["lang"] for i in range(600)])
    years = np.array([meta(i)["year"] for i in range(600)])
    tags = np.array([meta(i)["tag"] for i in range(600)])
    cases = [
        ({"lang": "fr"}, langs == "fr"),
        ({"lang": {"in": ["en", "de"]}}, np.isin(langs, ["en", "de"])),
        ({"year": {"gte": 2010, "lt": 2015}}, (years >= 2010) & (years < 2015)),
        ({"lang": "en", "tag": {"nin": ["t1", "t2"]}, "year": {"gt": 2003}},
         (langs == "en") & ~np.isin(tags, ["t1", "t2"]) & (years > 2003)),
    ]
    for flt, mask in cases:
        r = search(api, "docs", vector=q.tolist(), k=10, filter=flt)
        assert r.status_code == 200, (flt, r.content)
        got = r.json()["results"]
        assert [x["id"] for x in got] == brute(vecs, q, 10, mask), flt
        assert all(mask[x["id"]] for x in got)

    # batch search: one result list per query
    qs = vecs[[1, 2, 3]]
    r = search(api, "docs", vectors=qs.tolist(), k=3)
    assert r.status_code == 200
    assert [res[0]["id"] for res in r.json()["results"]] == [1, 2, 3]

    # get by id: integer ids written in the URL, string ids as given
    r = api.get(f"{BASE}docs/vectors/42/")
    assert r.status_code == 200 and r.json()["id"] == 42
    assert np.allclose(r.json()["values"], vecs[42])
    upsert(api, "docs", vecs[:1], ids=["doc-a"])
    assert api.get(f"{BASE}docs/vectors/doc-a/").json()["metadata"] == meta(0)

    # delete by id, and a batch of ids
    assert api.delete(f"{BASE}docs/vectors/17/").status_code == 204
    assert api.get(f"{BASE}docs/vectors/17/").status_code == 404
    assert api.delete(f"{BASE}docs/vectors/17/").status_code == 404
    r = api.post(f"{BASE}docs/delete-vectors/", {"ids": [1, 2, "nope"]}, format="json")
    assert r.status_code == 200 and r.json() == {"deleted": 2}
    res = search(api, "docs", vector=q.tolist(), k=5).json()["results"]
    assert 17 not in [x["id"] for x in res]

    # memory and count are reported
    r = api.get(f"{BASE}docs/")
    assert r.status_code == 200
    body = r.json()
    assert body["stats"]["count"] == 600 + 1 - 3
    assert body["vector_count"] == 598 and body["memory_bytes"] > 600 * DIM * 4
    listed = api.get(BASE).json()["results"]
    assert [c["name"] for c in listed] == ["docs"] and listed[0]["memory_bytes"] > 0


def test_acknowledged_writes_survive_reopen(api, pool):
    """What a web-server restart does: close without checkpoint, open again (WAL replay)."""
    row = make(api, "durable", metric="cosine")
    vecs = data(300, seed=5)
    upsert(api, "durable", vecs)
    api.post(f"{BASE}durable/delete-vectors/", {"ids": [5]}, format="json")
    registry.close(row["path"], checkpoint=False)
    assert registry.peek(row["path"]) is None
    r = api.get(f"{BASE}durable/")
    assert r.json()["stats"]["count"] == 299
    assert api.get(f"{BASE}durable/vectors/5/").status_code == 404
    res = search(api, "durable", vector=vecs[9].tolist(), k=1).json()["results"]
    assert res[0]["id"] == 9 and res[0]["score"] == pytest.approx(1.0, abs=1e-4)


def err(r, status):
    assert r.status_code == status, (r.status_code, r.content)
    body = r.json()
    assert set(body) >= {"error", "detail"} and body["detail"], body
    return body


def test_bad_input_answers_4xx_with_a_message(api, viewer_api, pool):
    make(api, "bad")
    make(api, "hn", index_type="hnsw")
    good = [0.5] * DIM
    upsert(api, "bad", data(20))

    # collection definitions
    err(api.post(BASE, {"name": "x1", "dimension": DIM, "metric": "hamming"}, format="json"), 400)
    err(api.post(BASE, {"name": "x2", "dimension": DIM, "index_type": "lsh"}, format="json"),
        400)
    body = err(api.post(BASE, {"name": "x3", "dimension": DIM, "index_type": "hnsw",
                                "params": {"M": 1}}, format="json"), 400)
    assert "M" in body["detail"]
    err(api.post(BASE, {"name": "x4", "dimension": 0}, format="json"), 400)
    err(api.post(BASE, {"name": "Bad Name", "dimension": DIM}, format="json"), 400)
    err(api.post(BASE, {"name": "x5", "dimension": DIM, "pool": "nope"}, format="json"), 400)
    assert err(api.post(BASE, {"name": "bad", "dimension": DIM}, format="json"),
               409)["error"] == "collection_exists"
    # a collection that would not fit in memory is refused before anything is created
    body = err(api.post(BASE, {"name": "huge", "dimension": 4096, "expected_count": 10**10},
                        format="json"), 409)
    assert body["error"] == "memory_budget_exceeded" and "memory" in body["detail"]
    assert api.get(f"{BASE}huge/").status_code == 404
    assert api.get("/api/v1/filesystems/vector-huge/").status_code == 404

    # vectors
    def up(items):
        return api.post(f"{BASE}bad/vectors/", {"vectors": items}, format="json")

    assert err(up([{"id": 1, "values": [1.0] * (DIM - 1)}]), 400)["error"] == \
        "dimension_mismatch"
    err(up([{"id": 1, "values": ["a"] * DIM}]), 400)
    err(up([{"id": None, "values": good}]), 400)
    err(up([{"id": 1, "values": good, "metadata": [1]}]), 400)
    err(up([{"id": 1, "values": good}, {"id": 1, "values": good}]), 400)
    err(up([]), 400)
    err(up("nope"), 400)
    err(api.post(f"{BASE}bad/vectors/", {}, format="json"), 400)
    err(api.get(f"{BASE}bad/vectors/999/"), 404)
    err(api.post(f"{BASE}bad/delete-vectors/", {"ids": 5}, format="json"), 400)

    # searches
    def s(**body):
        return api.post(f"{BASE}bad/search/", body, format="json")

    assert err(s(vector=[1.0] * 3), 400)["error"] == "dimension_mismatch"
    assert err(s(vector=good, k=0), 400)["error"] == "invalid_k"
    err(s(vector=good, k=-3), 400)
    err(s(vector=good, k=10**7), 400)
    err(s(vector=good, k="ten"), 400)
    assert err(s(vector=good, filter={"colour": "red"}), 400)["error"] == \
        "unknown_filter_field"
    err(s(vector=good, filter={"year": {"between": [1, 2]}}), 400)
    err(s(vector=good, filter=[1]), 400)
    err(s(vector=good, nprobe=4), 400)           # nprobe does not apply to flat
    err(s(k=3), 400)                             # no vector
    err(s(vector=good, vectors=[good]), 400)     # both
    err(s(vector=good, colour=1), 400)           # unknown field
    err(api.post(f"{BASE}hn/search/", {"vector": good, "ef_search": 0}, format="json"), 400)
    err(api.post(f"{BASE}nope/search/", {"vector": good}, format="json"), 404)

    # roles: a viewer reads and searches, but cannot write
    assert viewer_api.post(f"{BASE}bad/search/", {"vector": good, "k": 2},
                           format="json").status_code == 200
    assert viewer_api.get(f"{BASE}bad/").status_code == 200
    err(viewer_api.post(f"{BASE}bad/vectors/", {"vectors": [{"id": 9, "values": good}]},
                        format="json"), 403)
    err(viewer_api.delete(f"{BASE}bad/"), 403)


def test_snapshot_restore_and_delete(api, pool):
    make(api, "src", index_type="hnsw", params={"M": 16})
    vecs = data(200, seed=9)
    upsert(api, "src", vecs)
    r = api.post(f"{BASE}src/snapshots/", {"name": "s1"}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["vector_count"] == 200
    err(api.post(f"{BASE}src/snapshots/", {"name": "s1"}, format="json"), 409)
    # changes after the snapshot are not in it
    api.post(f"{BASE}src/delete-vectors/", {"ids": list(range(100))}, format="json")
    assert api.get(f"{BASE}src/").json()["stats"]["count"] == 100
    r = api.post(f"{BASE}src/snapshots/s1/restore/", {"name": "copy"}, format="json")
    assert r.status_code == 201, r.content
    copy = api.get(f"{BASE}copy/").json()
    assert copy["stats"]["count"] == 200 and copy["index_type"] == "hnsw"
    res = search(api, "copy", vector=vecs[3].tolist(), k=1).json()["results"]
    assert res[0]["id"] == 3 and res[0]["metadata"] == meta(3)
    assert [x["name"] for x in api.get(f"{BASE}src/snapshots/").json()] == ["s1"]
    err(api.get(f"{BASE}src/snapshots/nope/"), 404)
    assert api.delete(f"{BASE}src/snapshots/s1/").status_code == 204

    # delete: the collection and its file system are gone
    assert api.delete(f"{BASE}src/").status_code == 204
    err(api.get(f"{BASE}src/"), 404)
    assert api.get("/api/v1/filesystems/vector-src/").status_code == 404
    err(search(api, "src", vector=vecs[0].tolist()), 404)
    # the name can be used again
    make(api, "src")
    assert api.get(f"{BASE}src/").json()["stats"]["count"] == 0
    assert json.loads(api.get(BASE).content)["count"] == 2


NON_FINITE = [
    ("vectors", '{"vectors": [{"id": 1, "values": [%s]}]}', "NaN", "parse_error"),
    ("vectors", '{"vectors": [{"id": 1, "values": [%s]}]}', "1e400", "invalid_values"),
    ("search", '{"vector": [%s]}', "Infinity", "parse_error"),
    ("search", '{"vector": [%s]}', "-1e999", "invalid_values"),
]


def _raw(template, bad):
    return template % ",".join([bad] + ["1"] * (DIM - 1))


def test_nan_and_infinite_values_are_400(api, pool):
    """Through the view (DRF parsing + engine checks), without the audit middleware."""
    from rest_framework.test import APIRequestFactory, force_authenticate

    from vector.api.views import VectorCollectionViewSet

    make(api, "nan")
    factory = APIRequestFactory()
    for action, template, bad, code in NON_FINITE:
        req = factory.post(f"{BASE}nan/{action}/", _raw(template, bad),
                           content_type="application/json")
        force_authenticate(req, user=api.user)
        resp = VectorCollectionViewSet.as_view({"post": action})(req, name="nan")
        assert resp.status_code == 400, (bad, resp.data)
        assert resp.data["error"] == code and resp.data["detail"], resp.data
    assert api.get(f"{BASE}nan/").json()["stats"]["count"] == 0


def test_nan_and_infinite_values_are_400_through_the_full_stack(api, pool):
    make(api, "nan2")
    for action, template, bad, code in NON_FINITE:
        r = api.post(f"{BASE}nan2/{action}/", _raw(template, bad),
                     content_type="application/json")
        assert r.status_code == 400 and r.json()["error"] == code, (bad, r.content)


def test_console_page_lists_collections(api, pool, client):
    from django.contrib.auth.models import User

    make(api, "paged")
    client.force_login(User.objects.get(username="admin"))
    r = client.get("/console/vector-collections/")
    assert r.status_code == 200
    assert b"paged" in r.content and b"Vector collections" in r.content
    assert b"/api/v1/vector-collections/{key}/build/" in r.content or b"build/" in r.content


def test_import_an_engine_snapshot(api, operator_api, pool, tmp_path):
    """Admins bring in a collection written by the engine elsewhere (bench, migrations)."""
    from vector.engine import Collection

    vecs = data(100, seed=21)
    coll = Collection.create(str(tmp_path / "src"), "src", DIM, "l2", "hnsw", {"M": 8},
                             checkpoint_interval=None)
    coll.upsert([{"id": i, "values": vecs[i].tolist(), "metadata": meta(i)} for i in range(100)])
    coll.snapshot(str(tmp_path / "snap"))
    coll.close()
    body = {"name": "imported", "path": str(tmp_path / "snap")}
    err(operator_api.post(f"{BASE}import/", body, format="json"), 403)
    err(api.post(f"{BASE}import/", {"name": "x", "path": "relative/dir"}, format="json"), 400)
    err(api.post(f"{BASE}import/", {"name": "x", "path": str(tmp_path)}, format="json"), 400)
    r = api.post(f"{BASE}import/", body, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["index_type"] == "hnsw" and r.json()["vector_count"] == 100
    res = search(api, "imported", vector=vecs[4].tolist(), k=1).json()["results"]
    assert res[0]["id"] == 4 and res[0]["metadata"] == meta(4)


def test_upsert_beyond_the_memory_budget_is_refused(api, pool):
    make(api, "budget")
    upsert(api, "budget", data(100))
    limit = registry.budget.limit
    registry.set_budget(registry.memory_bytes() + 50_000)
    try:
        items = [{"id": 1000 + i, "values": v.tolist()} for i, v in enumerate(data(2000))]
        body = err(api.post(f"{BASE}budget/vectors/", {"vectors": items}, format="json"), 409)
        assert body["error"] == "memory_budget_exceeded" and "budget" in body["detail"]
        assert api.get(f"{BASE}budget/").json()["stats"]["count"] == 100   # nothing applied
    finally:
        registry.set_budget(limit)
    assert api.post(f"{BASE}budget/vectors/", {"vectors": items}, format="json").status_code == 200


def test_compact_base64_upsert_and_search(api, pool):
    import base64

    def b64(mat):
        return base64.b64encode(np.ascontiguousarray(mat, "<f4").tobytes()).decode()

    make(api, "bin")
    vecs = data(300, seed=31)
    r = api.post(f"{BASE}bin/vectors/", {"ids": list(range(300)), "vectors_b64": b64(vecs),
                                         "metadata": [meta(i) for i in range(300)]},
                 format="json")
    assert r.status_code == 200 and r.json()["upserted"] == 300, r.content
    r = search(api, "bin", vectors_b64=b64(vecs[[5, 6]]), k=3, filter={"lang": meta(5)["lang"]})
    assert r.status_code == 200, r.content
    assert r.json()["results"][0][0]["id"] == 5
    assert all(h["metadata"]["lang"] == meta(5)["lang"] for h in r.json()["results"][1])
    assert api.get(f"{BASE}bin/vectors/7/").json()["metadata"] == meta(7)
    # bad compact input
    assert err(search(api, "bin", vectors_b64=b64(vecs[:1, :-1])), 400)["error"] == \
        "dimension_mismatch"
    err(search(api, "bin", vectors_b64="not base64!"), 400)
    bad = vecs[:2].copy()
    bad[1, 3] = np.inf
    assert err(search(api, "bin", vectors_b64=b64(bad)), 400)["error"] == "invalid_values"
    err(api.post(f"{BASE}bin/vectors/", {"ids": [1], "vectors_b64": b64(vecs[:2])},
                 format="json"), 400)
    err(api.post(f"{BASE}bin/vectors/", {"ids": 1, "vectors_b64": b64(vecs[:1])},
                 format="json"), 400)
    err(search(api, "bin", vector=vecs[0].tolist(), vectors_b64=b64(vecs[:1])), 400)


def test_a_collections_file_system_is_kept_by_the_vector_service(api, operator_api, pool):
    """Its file system is not the user's to delete, shrink or re-own while the collection
    lives there (409 kept_by_service naming the vector service); deleting the collection
    removes it."""
    make(api, "kept")
    fs = api.get("/api/v1/filesystems/vector-kept/").json()
    assert fs["kept_by"] == "vector" and fs["mode"] == "0700"
    for call in (lambda: operator_api.delete("/api/v1/filesystems/vector-kept/"),
                 lambda: operator_api.patch("/api/v1/filesystems/vector-kept/",
                                            {"quota_bytes": 1 << 20}, format="json"),
                 lambda: operator_api.patch("/api/v1/filesystems/vector-kept/",
                                            {"mode": "0777"}, format="json")):
        r = call()
        assert r.status_code == 409 and r.json()["error"] == "kept_by_service", r.content
        assert r.json()["kept_by"] == "vector"
    assert "collection kept" in operator_api.delete(
        "/api/v1/filesystems/vector-kept/").json()["detail"]
    upsert(api, "kept", data(10))
    assert search(api, "kept", vector=data(1)[0].tolist(), k=1).status_code == 200
    assert api.delete(f"{BASE}kept/").status_code == 204
    assert api.get("/api/v1/filesystems/vector-kept/").status_code == 404

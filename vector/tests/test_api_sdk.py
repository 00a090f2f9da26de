"""The SDK against a live server: create, upsert, search with a filter, get, delete, errors,
build job, snapshot and restore."""
import numpy as np
import pytest

from vector.registry import registry
from vector.sdk import VectorClient, VectorError


@pytest.fixture
def client(api, live_server, worker):
    r = api.post("/api/v1/pools/", {"name": "default", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.content
    yield VectorClient(live_server.url, api.token)
    registry.close_all()


def test_sdk_round_trip(client):
    rng = np.random.default_rng(4)
    vecs = rng.standard_normal((3000, 24)).astype(np.float32)
    made = client.create_collection("sdk", dimension=24, metric="ip", index_type="ivf_flat",
                                    params={"nlist": 32})
    assert made["name"] == "sdk" and made["index_type"] == "ivf_flat"
    items = [{"id": f"v{i}", "values": vecs[i], "metadata": {"even": i % 2 == 0, "n": i}}
             for i in range(len(vecs))]
    assert client.upsert("sdk", items, batch_size=700) == 3000

    q = vecs[10]
    exact = np.argsort(-(vecs @ q))[:5]
    hits = client.search("sdk", q, k=5)
    assert [h["id"] for h in hits] == [f"v{i}" for i in exact]
    hits = client.search("sdk", q, k=5, filter={"even": False, "n": {"lt": 1000}})
    assert hits and all(h["metadata"]["n"] % 2 == 1 and h["metadata"]["n"] < 1000
                        for h in hits)
    batch = client.search_batch("sdk", vecs[:3], k=1, include_metadata=False)
    assert [r[0]["id"] for r in batch] == [f"v{np.argmax(vecs @ vecs[i])}" for i in range(3)]
    assert client.search_batch("sdk", vecs[:3], k=1, binary=False) == \
        client.search_batch("sdk", vecs[:3], k=1)
    assert client.upsert_arrays("sdk", ["w1", "w2"], vecs[:2] * 2,
                                metadata=[{"n": -1}, None]) == 2
    assert client.get("sdk", "w1")["metadata"] == {"n": -1}
    assert client.delete("sdk", ["w1", "w2"]) == 2

    job = client.build("sdk", wait=True, timeout=120)
    assert job["progress"] == 100.0
    assert client.collection("sdk")["index_state"] == "ready"
    hits = client.search("sdk", q, k=5, nprobe=32)   # all lists: exact again
    assert [h["id"] for h in hits] == [f"v{i}" for i in exact]

    assert client.get("sdk", "v7")["metadata"] == {"even": False, "n": 7}
    assert client.delete("sdk", ["v7", "v8", "missing"]) == 2
    with pytest.raises(VectorError) as e:
        client.get("sdk", "v7")
    assert e.value.status == 404

    with pytest.raises(VectorError) as e:
        client.search("sdk", [1.0, 2.0], k=3)
    assert e.value.status == 400 and e.value.code == "dimension_mismatch"
    with pytest.raises(VectorError) as e:
        client.search("sdk", q, k=0)
    assert e.value.code == "invalid_k"
    with pytest.raises(VectorError) as e:
        client.create_collection("sdk", dimension=24)
    assert e.value.status == 409

    client.snapshot("sdk", "s1")
    client.restore("sdk", "s1", "sdk-copy")
    assert client.collection("sdk-copy")["stats"]["count"] == 2998
    assert sorted(c["name"] for c in client.list_collections()) == ["sdk", "sdk-copy"]
    client.drop_collection("sdk-copy")
    client.drop_collection("sdk")
    assert client.list_collections() == []


def test_cli_create_search_build(client, api, live_server):
    import argparse

    from plumbing.restclient import RestClient
    from vector import cli

    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    handlers = cli.register(parser.add_subparsers(dest="cmd"))
    c = RestClient(live_server.url, api.token)
    printed = []

    def run(*argv):
        args = parser.parse_args(["--json", *argv])
        return handlers[args.cmd](c, args, lambda data, cols: printed.append(data))

    run("vector", "create", "clic", "--dim", "3", "--index", "hnsw", "--params", '{"M": 8}')
    assert printed[-1]["index_type"] == "hnsw" and printed[-1]["params"] == {"M": 8}
    client.upsert("clic", [{"id": i, "values": [i, 1.0, 0.0], "metadata": {"odd": i % 2}}
                           for i in range(20)])
    run("vector", "search", "clic", "--vector", "[4.1, 1, 0]", "--k", "2",
        "--filter", '{"odd": 1}')
    assert [h["id"] for h in printed[-1]] == [5, 3]
    assert run("vector", "build", "clic") == 0
    run("vector", "show", "clic")
    assert printed[-1]["stats"]["count"] == 20
    run("vector", "delete", "clic")
    run("vector", "list")
    assert printed[-1] == []

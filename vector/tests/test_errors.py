"""Every kind of bad input raises a specific exception with a message a user can act on, of
the domain kind (`plumbing.errors`) the API's one handler maps to a status."""

import math

import numpy as np
import pytest

from vector.engine import (Collection, CollectionExists, CollectionNotFound, DimensionMismatch,
                           InsufficientTrainingData, InvalidFilter, InvalidId, InvalidInput,
                           InvalidK, InvalidMetadata, InvalidName, InvalidParams, InvalidValues,
                           UnknownFilterField, UnknownIndexType, UnknownMetric, VectorError,
                           VectorNotFound)
from plumbing import errors

DIM = 4


@pytest.fixture
def coll(manager):
    c = manager.create("bad", DIM, "cosine", "hnsw")
    c.upsert([{"id": 1, "values": [1, 0, 0, 0], "metadata": {"colour": "red", "size": 3}},
              {"id": "one", "values": [0, 1, 0, 0]}])
    return c


@pytest.mark.parametrize("kwargs,exc,words", [
    ({"metric": "manhattan"}, UnknownMetric, "l2, ip, cosine"),
    ({"index_type": "annoy"}, UnknownIndexType, "flat, ivf_flat, ivf_pq, hnsw"),
    ({"index_type": "hnsw", "params": {"M": 0}}, InvalidParams, "between"),
    ({"index_type": "hnsw", "params": {"nlist": 8}}, InvalidParams, "allowed: M"),
    ({"index_type": "ivf_pq", "params": {"m": 3}}, InvalidParams, "divide"),
    ({"index_type": "ivf_flat", "params": {"nlist": "8"}}, InvalidParams, "integer"),
    ({"index_type": "flat", "params": [1]}, InvalidParams, "object"),
    ({"dimension": 0}, InvalidInput, "dimension"),
    ({"dimension": 4.0}, InvalidInput, "integer"),
    ({"name": "Bad Name!"}, InvalidName, "lowercase"),
])
def test_bad_collection_definitions(manager, kwargs, exc, words):
    args = dict({"name": "x", "dimension": DIM}, **kwargs)
    with pytest.raises(exc, match=words):
        manager.create(**args)
    assert isinstance(exc("x"), errors.Invalid)  # 400


def test_duplicate_and_missing_collections(manager):
    manager.create("dup", DIM)
    with pytest.raises(CollectionExists):
        manager.create("dup", DIM)
    with pytest.raises(CollectionNotFound):
        manager.get("missing")
    with pytest.raises(CollectionNotFound):
        manager.drop("missing")
    manager.drop("dup")
    assert manager.list() == []
    assert isinstance(CollectionExists("x"), errors.Conflict)  # 409
    assert isinstance(CollectionNotFound("x"), errors.NotFound)  # 404


@pytest.mark.parametrize("items,exc,words", [
    ([{"id": 2, "values": [1, 2, 3]}], DimensionMismatch, "dimension 3.*dimension is 4"),
    ([{"id": 2, "values": [1, 2, 3, float("nan")]}], InvalidValues, "NaN"),
    ([{"id": 2, "values": [1, 2, 3, math.inf]}], InvalidValues, "infinite"),
    ([{"id": 2, "values": [1, 2, 3, 1e39]}], InvalidValues, "float32"),
    ([{"id": 2, "values": [0, 0, 0, 0]}], InvalidValues, "cosine"),
    ([{"id": 2, "values": ["a", 1, 2, 3]}], InvalidInput, "numbers"),
    ([{"id": 2.5, "values": [1, 2, 3, 4]}], InvalidId, "string or an integer"),
    ([{"id": True, "values": [1, 2, 3, 4]}], InvalidId, "string or an integer"),
    ([{"id": "", "values": [1, 2, 3, 4]}], InvalidId, "characters"),
    ([{"id": 2, "values": [1, 2, 3, 4]}, {"id": 2, "values": [1, 2, 3, 4]}], InvalidId,
     "more than once"),
    ([{"values": [1, 2, 3, 4]}], InvalidInput, "needs an 'id'"),
    ([{"id": 2, "values": [1, 2, 3, 4], "extra": 1}], InvalidInput, "unknown field"),
    ([{"id": 2, "values": [1, 2, 3, 4], "metadata": [1]}], InvalidMetadata, "JSON object"),
    ([{"id": 2, "values": [1, 2, 3, 4], "metadata": {"x": float("nan")}}], InvalidMetadata,
     "valid JSON"),
    ([], InvalidInput, "non-empty"),
])
def test_bad_upserts_change_nothing(coll, items, exc, words):
    with pytest.raises(exc, match=words):
        coll.upsert(items)
    assert len(coll) == 2
    with pytest.raises(VectorNotFound):
        coll.get(2)


@pytest.mark.parametrize("kwargs,exc,words", [
    ({"vector": [1, 0, 0]}, DimensionMismatch, "query vector has dimension 3"),
    ({"vector": [1, 0, 0, float("nan")]}, InvalidValues, "NaN"),
    ({"vector": [1, 0, 0, 1], "k": 0}, InvalidK, "between 1 and 10000"),
    ({"vector": [1, 0, 0, 1], "k": -3}, InvalidK, "between 1 and 10000"),
    ({"vector": [1, 0, 0, 1], "k": 10_001}, InvalidK, "between 1 and 10000"),
    ({"vector": [1, 0, 0, 1], "k": "10"}, InvalidK, "integer"),
    ({"vector": [1, 0, 0, 1], "filter": {"colour": "red", "shape": "x"}}, UnknownFilterField,
     "'shape' is not present"),
    ({"vector": [1, 0, 0, 1], "filter": {"colour": {"like": "r%"}}}, InvalidFilter,
     "unknown filter operator 'like'"),
    ({"vector": [1, 0, 0, 1], "filter": {"size": {"gte": "3"}}}, InvalidFilter, "finite number"),
    ({"vector": [1, 0, 0, 1], "filter": {"colour": ["red"]}}, InvalidFilter, "in"),
    ({"vector": [1, 0, 0, 1], "filter": {"colour": {"in": "red"}}}, InvalidFilter, "list"),
    ({"vector": [1, 0, 0, 1], "filter": ["colour"]}, InvalidFilter, "object"),
    ({"vector": [1, 0, 0, 1], "nprobe": 4}, InvalidParams, "does not apply to a hnsw"),
    ({"vector": [1, 0, 0, 1], "ef_search": 0}, InvalidParams, "between"),
])
def test_bad_searches(coll, kwargs, exc, words):
    with pytest.raises(exc, match=words):
        coll.search(**kwargs)
    assert issubclass(exc, VectorError) and issubclass(exc, errors.Invalid)


def test_batch_search_and_delete_validation(coll):
    with pytest.raises(DimensionMismatch):
        coll.search_batch([[1, 0, 0, 0], [1, 0, 0]], 3)
    with pytest.raises(InvalidId):
        coll.delete([{"id": 1}])
    with pytest.raises(InvalidInput, match="list of ids"):
        coll.delete("one")
    assert coll.delete(["nope"]) == 0
    assert coll.delete([1, 1]) == 1
    with pytest.raises(VectorNotFound, match="no vector with id 1"):
        coll.get(1)
    assert isinstance(VectorNotFound("x"), errors.NotFound)  # 404


def test_ivf_needs_enough_training_data(manager):
    c = manager.create("tiny", DIM, "l2", "ivf_flat", {"nlist": 64})
    c.upsert_arrays(list(range(10)), np.random.default_rng(0).random((10, DIM)))
    with pytest.raises(InsufficientTrainingData, match="at least 64 vectors"):
        c.build_index()
    assert c.index_state == "untrained" and len(c.search([0.5] * DIM, 3)) == 3


def test_create_in_used_directory(tmpdir_path):
    Collection.create(tmpdir_path, "a", DIM, checkpoint_interval=None).close()
    with pytest.raises(CollectionExists):
        Collection.create(tmpdir_path, "b", DIM)

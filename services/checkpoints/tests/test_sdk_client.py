"""The SDK's client and errors without a plane: what a training process relies on when a
request is refused, when the plane is not there, and when DCP's async save pickles it."""
import pickle

import pytest
import requests

from plumbing.restclient import ApiError
from services.checkpoints.sdk import CheckpointClient, IncompleteCheckpointError, StrataError
from tests.kit import free_port


def test_errors_keep_their_attributes_through_pickle():
    err = IncompleteCheckpointError(409, {"error": "incomplete", "detail": "a is short",
                                          "shards": [{"name": "a", "problem": "short"}]})
    for e in (err, pickle.loads(pickle.dumps(err))):
        assert isinstance(e, IncompleteCheckpointError) and isinstance(e, StrataError)
        assert isinstance(e, ApiError)
        assert (e.status, e.code, e.detail) == (409, "incomplete", "a is short")
        assert e.shards == [{"name": "a", "problem": "short"}]
        assert str(e) == "409 incomplete: a is short"


def test_client_pickles_and_an_unreachable_plane_raises_requests_error():
    port = free_port()
    client = CheckpointClient(f"http://127.0.0.1:{port}/api/v1/", "tok", timeout=5)
    assert client.url == f"http://127.0.0.1:{port}"  # without /api/v1, as before
    copy = pickle.loads(pickle.dumps(client))
    assert copy.session is copy.rest.session
    assert copy.session.headers["Authorization"] == "Token tok"
    with pytest.raises(requests.ConnectionError):
        copy.latest("llm")

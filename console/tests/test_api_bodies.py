"""Request bodies are JSON and query numbers are what the schema says (issue 34: a form body's
empty `pool` picked the default pool, any spelling passed for a boolean, `?step=0.5` listed
nothing instead of a 400)."""
import pytest

from services.storage.models import FileSystem, Volume
from vector.models import VectorCollection

pytestmark = pytest.mark.django_db


@pytest.fixture
def default_pool(api):
    r = api.post("/api/v1/pools/", {"name": "default", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.content


@pytest.mark.parametrize("path,body", [
    ("/api/v1/filesystems/", {"name": "f1", "pool": ""}),
    ("/api/v1/volumes/", {"name": "v1", "pool": "", "size_bytes": 1 << 20}),
    ("/api/v1/vector-collections/", {"name": "c1", "pool": "", "dimension": 4}),
])
@pytest.mark.parametrize("encoding", ["multipart", "form"])
def test_a_form_body_is_a_415_and_makes_nothing(api, default_pool, path, body, encoding):
    if encoding == "form":
        r = api.post(path, body, content_type="application/x-www-form-urlencoded")
    else:
        r = api.post(path, body)                     # the test client's default: multipart
    assert r.status_code == 415, r.content
    assert not (FileSystem.objects.exists() or Volume.objects.exists()
                or VectorCollection.objects.exists())


@pytest.mark.parametrize("path,body", [
    ("/api/v1/filesystems/", {"name": "f1", "pool": ""}),
    ("/api/v1/volumes/", {"name": "v1", "pool": "", "size_bytes": 1 << 20}),
    ("/api/v1/vector-collections/", {"name": "c1", "pool": "", "dimension": 4}),
])
def test_an_empty_pool_is_a_400_naming_pool(api, default_pool, path, body):
    r = api.post(path, body, format="json")
    assert r.status_code == 400 and "pool" in r.json()["fields"], r.content


def test_a_boolean_is_true_or_false(api, default_pool):
    r = api.post("/api/v1/volumes/", {"name": "v1", "size_bytes": 1 << 20}, format="json")
    assert r.status_code == 201, r.content
    r = api.post("/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd",
                                            "allow_any": "maybe"}, format="json")
    assert r.status_code == 400 and "allow_any" in r.json()["fields"], r.content


def test_a_whole_number_filter_refuses_a_fraction(api, default_pool):
    r = api.post("/api/v1/filesystems/", {"name": "ckpt"}, format="json")
    assert r.status_code == 201, r.content
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "j1", "filesystem": "ckpt"},
                 format="json")
    assert r.status_code == 201, r.content
    assert api.get("/api/v1/checkpoint-jobs/j1/versions/?step=5").status_code == 200
    r = api.get("/api/v1/checkpoint-jobs/j1/versions/?step=0.5")
    assert r.status_code == 400 and "step" in r.json()["fields"], r.content

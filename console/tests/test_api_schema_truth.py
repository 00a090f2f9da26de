"""What the API answers, the schema says (issue 34 found `s3-keys.created_by` null while the
schema said a string): every field that can be null in the database is nullable in the
schema, and every list, status and id the fuzz test met is documented."""
import importlib
import inspect

import pytest
from rest_framework import serializers

pytestmark = pytest.mark.django_db

SERIALIZER_MODULES = [
    "plane.api.serializers", "services.block.api.serializers",
    "services.checkpoints.api.serializers", "services.file.api.serializers",
    "services.object.api.serializers", "services.protection.api.serializers",
    "services.storage.api.serializers", "services.tiering.api.serializers",
    "vector.api.serializers",
]


def _model_serializers():
    for name in SERIALIZER_MODULES:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, serializers.ModelSerializer) and cls.__module__ == name
                    and getattr(getattr(cls, "Meta", None), "model", None)):
                yield cls


def test_a_field_null_in_the_database_is_nullable_in_the_schema():
    wrong = []
    for cls in _model_serializers():
        for name, field in cls().fields.items():
            if field.source == "*" or "." in field.source or field.write_only:
                continue
            try:
                column = cls.Meta.model._meta.get_field(field.source)
            except Exception:        # a method field or property: no column
                continue
            if column.null and not column.many_to_many and not field.allow_null:
                wrong.append(f"{cls.__name__}.{name}")
    assert not wrong, f"null in the database, not nullable in the schema: {wrong}"


def test_lists_and_statuses_are_documented(api):
    paths = api.get("/api/v1/schema/?format=json").json()["paths"]

    def body(path, method, code):
        return paths[path][method]["responses"][code]["content"]["application/json"]["schema"]

    assert body("/api/v1/bucket-snapshots/", "get", "200")["$ref"].endswith(
        "/BucketSnapshotList")
    assert body("/api/v1/vector-collections/{name}/snapshots/", "get", "200")["type"] == "array"
    assert "201" in paths["/api/v1/vector-collections/{name}/snapshots/"]["post"]["responses"]
    assert "204" in paths["/api/v1/vector-collections/{name}/snapshots/{snap}/"]["delete"][
        "responses"]
    assert body("/api/v1/io-budget/", "get", "200")["$ref"].endswith("/PaginatedIOBudgetList")
    assert paths["/api/v1/io-budget/{id}/"]["get"]["parameters"][0]["schema"]["enum"] == [1]


def test_io_budget_has_one_id_and_pages_like_every_list(api):
    assert api.get("/api/v1/io-budget/2/").status_code == 404
    assert api.get("/api/v1/io-budget/x/").status_code == 404
    listed = api.get("/api/v1/io-budget/").json()
    assert listed["count"] == 1 and listed["results"][0]["id"] == 1
    assert api.get("/api/v1/io-budget/1/").json()["id"] == 1


def test_every_operation_documents_404_and_503(api):
    # a body or a query may name what does not exist (POST /replica-transfers/ with a pool
    # that is not there: 404), and a GET may need a daemon that is down (503)
    paths = api.get("/api/v1/schema/?format=json").json()["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert {"404", "503"} <= set(operation["responses"]), (method, path)

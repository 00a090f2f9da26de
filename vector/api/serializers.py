"""Request and response shapes of /api/v1/vector-collections/."""
import json

from rest_framework import serializers

from plane.api.limits import INT64
from services.storage.models import Pool
from vector.engine import INDEX_TYPES, MAX_K, METRICS
from vector.models import NAME_HELP, NAME_RE, VectorCollection, VectorSnapshot


class JSONObjectField(serializers.JSONField):
    """A JSON object, also accepted as a string holding one (console forms send text)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            if not data.strip():
                return {}
            try:
                data = json.loads(data)
            except ValueError:
                raise serializers.ValidationError("Must be a JSON object.") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        return data


def _default_pool() -> Pool:
    pool = Pool.objects.filter(name="default").first()
    if pool is None:
        raise serializers.ValidationError({"pool": "No pool given and no pool named default."})
    return pool


class VectorCollectionSerializer(serializers.ModelSerializer):
    name = serializers.RegexField(NAME_RE, max_length=56,
                                  error_messages={"invalid": NAME_HELP})
    dimension = serializers.IntegerField(min_value=1, max_value=65536)
    metric = serializers.ChoiceField(choices=list(METRICS), default="l2")
    index_type = serializers.ChoiceField(choices=list(INDEX_TYPES), default="flat")
    params = JSONObjectField(required=False, default=dict)
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        required=False)
    expected_count = serializers.IntegerField(min_value=0, max_value=INT64, required=False,
                                              default=0,
                                              write_only=True)
    filesystem = serializers.SlugRelatedField(slug_field="name", read_only=True)
    path = serializers.CharField(source="data_path", read_only=True)

    class Meta:
        model = VectorCollection
        fields = ["id", "name", "dimension", "metric", "index_type", "params", "pool",
                  "expected_count", "filesystem", "path", "vector_count", "memory_bytes",
                  "index_state", "created_at", "updated_at"]
        read_only_fields = ["filesystem", "path", "vector_count", "memory_bytes",
                            "index_state", "created_at", "updated_at"]

    def validate(self, attrs):
        attrs["pool"] = attrs.get("pool") or _default_pool()
        return attrs


class VectorSnapshotSerializer(serializers.ModelSerializer):
    name = serializers.RegexField(NAME_RE, max_length=56,
                                  error_messages={"invalid": NAME_HELP})
    collection = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = VectorSnapshot
        fields = ["id", "name", "collection", "path", "vector_count", "created_at"]
        read_only_fields = ["path", "vector_count", "created_at"]


class RestoreSerializer(serializers.Serializer):
    name = serializers.RegexField(NAME_RE, max_length=56,
                                  error_messages={"invalid": NAME_HELP})
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        required=False)


class ImportSerializer(serializers.Serializer):
    name = serializers.RegexField(NAME_RE, max_length=56,
                                  error_messages={"invalid": NAME_HELP})
    path = serializers.CharField(max_length=1000)
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        required=False)

    def validate(self, attrs):
        attrs["pool"] = attrs.get("pool") or _default_pool()
        return attrs


class UpsertSerializer(serializers.Serializer):
    """`vectors`: [{id, values, metadata}]; the engine checks every item."""

    vectors = serializers.JSONField()


class DeleteVectorsSerializer(serializers.Serializer):
    ids = serializers.JSONField()


class SearchSerializer(serializers.Serializer):
    """Documentation only: the engine validates the body (see vector.service.search)."""

    vector = serializers.ListField(child=serializers.FloatField(), required=False)
    vectors = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()),
                                    required=False)
    k = serializers.IntegerField(required=False, default=10, min_value=1, max_value=MAX_K)
    filter = serializers.JSONField(required=False)
    nprobe = serializers.IntegerField(required=False, min_value=1,
                                      max_value=1 << 20)
    ef_search = serializers.IntegerField(required=False, min_value=1,
                                         max_value=1 << 16)

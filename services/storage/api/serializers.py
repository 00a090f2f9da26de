from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dataplane import MAX_VOLUME_BYTES, MIN_VOLUME_BYTES, InvalidArgument, check_volume_size
from plane.api.limits import INT64
from services.storage import service
from services.storage.drivers import default_driver_kind
from services.storage import cephkeys
from services.storage.models import CephClientKey, FileSystem, Pool, Snapshot, Volume


VOLUME_SIZE_HELP = (
    "Bytes, whole 512-byte sectors, at least 1 MiB and at most what the pool's driver serves "
    "(local: 2^63 - 2^30; directory: 16 TiB; spdk: 64 TiB; ceph: 256,000,000 objects of "
    "4 MiB). "
    "Volumes are thin: the size may exceed the pool's free space (overcommit), and writes "
    "beyond the space the pool has fail (ENOSPC); used_bytes says what a volume holds.")


def volume_size_field(**kw) -> serializers.IntegerField:
    """size_bytes of a volume: the widest range of any driver in the schema; the pool's own
    range is checked by :func:`check_size` once the pool is known."""
    return serializers.IntegerField(min_value=MIN_VOLUME_BYTES,
                                    max_value=max(MAX_VOLUME_BYTES.values()),
                                    help_text=VOLUME_SIZE_HELP, **kw)


def check_size(size_bytes: int, pool: Pool, field: str = "size_bytes") -> int:
    """``size_bytes`` if a volume on ``pool`` may have it, else a 400 naming ``field``."""
    try:
        return check_volume_size(size_bytes, pool.driver)
    except InvalidArgument as exc:
        raise serializers.ValidationError({field: str(exc)}) from None


_DEVICE_OBJECT = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Block device path, or image:SIZE."},
        "fault_domain": {"type": "string", "default": "default"},
    },
    "required": ["path"],
}


@extend_schema_field({"oneOf": [
    {"type": "string", "description": "Block device path, or image:SIZE."}, _DEVICE_OBJECT]})
class DeviceField(serializers.Field):
    """A device is "PATH" or {"path": PATH, "fault_domain": LABEL}; PATH may be image:SIZE."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = {"path": data}
        if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not data["path"]:
            raise serializers.ValidationError(
                'A device is a path string or {"path": ..., "fault_domain": ...}.')
        return {"path": data["path"], "fault_domain": str(data.get("fault_domain") or "default")}

    def to_representation(self, value):
        return value


class PoolSerializer(serializers.ModelSerializer):
    devices = serializers.ListField(child=DeviceField(), required=False, default=list)
    driver = serializers.ChoiceField(choices=["local", "directory", "spdk", "ceph"],
                                     required=False)
    redundancy = serializers.RegexField(
        r"^(none|mirror|mirror3|raid10|replicated:\d{1,2}|ec:\d{1,2}\+\d{1,2})$",
        max_length=16, required=False, default="none",
        help_text="none, mirror, mirror3 or raid10; on a ceph pool replicated:N (default "
                  "replicated:3) or ec:K+M.")
    ceph_conf = serializers.CharField(
        max_length=500, required=False, write_only=True,
        help_text="ceph pools: path of the cluster's ceph.conf (default /etc/ceph/ceph.conf).")
    ceph_client = serializers.RegexField(
        r"^[A-Za-z0-9._-]{1,64}$", required=False, write_only=True,
        help_text="ceph pools: the cephx client name, e.g. strata for client.strata "
                  "(default admin).")
    ceph_keyring = serializers.CharField(
        max_length=500, required=False, write_only=True,
        help_text="ceph pools: keyring path, if not the one ceph.conf names.")
    failure_domain = serializers.ChoiceField(
        choices=["osd", "host", "rack"], required=False, write_only=True,
        help_text="ceph pools: the CRUSH bucket type copies are spread over (default host).")
    min_size = serializers.IntegerField(
        min_value=1, max_value=20, required=False, write_only=True,
        help_text="ceph pools: copies that must be up to accept writes.")
    ceph = serializers.JSONField(read_only=True, help_text=(
        "ceph pools: conf, client, keyring, failure_domain, min_size."))
    health_detail = serializers.JSONField(read_only=True, help_text=(
        "ceph pools: the cluster's status (HEALTH_OK/WARN/ERR), reasons, failed_domains "
        "(failure domains with an OSD down), pg_states and recovery progress."))

    CEPH_FIELDS = ("ceph_conf", "ceph_client", "ceph_keyring", "failure_domain", "min_size")

    class Meta:
        model = Pool
        fields = ["id", "name", "driver", "devices", "redundancy", "media", "state", "error",
                  "mountpoint", "size_bytes", "used_bytes", "free_bytes", "device_status",
                  "features_off", "ceph_conf", "ceph_client", "ceph_keyring",
                  "failure_domain", "min_size", "ceph", "health_detail", "node",
                  "created_at", "updated_at"]
        read_only_fields = ["state", "error", "mountpoint", "size_bytes", "used_bytes", "node",
                            "free_bytes", "device_status", "features_off",
                            "created_at", "updated_at"]

    def validate(self, attrs):
        if self.instance is not None:
            raise serializers.ValidationError("A pool's devices and layout cannot be changed.")
        attrs.setdefault("driver", default_driver_kind())
        given = [f for f in self.CEPH_FIELDS if f in attrs]
        if attrs["driver"] == "ceph":
            return self._validate_ceph(attrs)
        if given:
            raise serializers.ValidationError({given[0]: "Only ceph pools take this."})
        if attrs.get("redundancy", "none") not in Pool.MIN_DEVICES:
            raise serializers.ValidationError({"redundancy": (
                f"Redundancy {attrs['redundancy']} is for ceph pools; use none, mirror, "
                "mirror3 or raid10.")})
        devices = attrs.get("devices") or []
        if attrs["driver"] == "directory":
            if devices:
                raise serializers.ValidationError(
                    {"devices": "The directory driver takes no devices."})
            return attrs
        redundancy = attrs.get("redundancy", "none")
        need = Pool.MIN_DEVICES[redundancy]
        if len(devices) < need:
            raise serializers.ValidationError({"devices": (
                f"Redundancy {redundancy} needs at least {need} device(s); "
                f"{len(devices)} given.")})
        paths = [d["path"] for d in devices if not d["path"].startswith("image:")]
        if len(paths) != len(set(paths)):
            raise serializers.ValidationError({"devices": "A device is listed twice."})
        for pool in Pool.objects.all():
            used = {d["path"] for d in pool.devices} & set(paths)
            if used:
                raise serializers.ValidationError({"devices": (
                    f"Device {sorted(used)[0]} is already in use by pool {pool.name}.")})
        return attrs


    def _validate_ceph(self, attrs):
        if attrs.get("devices"):
            raise serializers.ValidationError({"devices": (
                "A ceph pool is placed on the cluster's OSDs by CRUSH: give no devices.")})
        if "redundancy" not in self.initial_data:
            attrs["redundancy"] = "replicated:3"
        ceph = {"conf": attrs.pop("ceph_conf", None) or "/etc/ceph/ceph.conf",
                "client": attrs.pop("ceph_client", None) or "admin",
                "keyring": attrs.pop("ceph_keyring", None),
                "failure_domain": attrs.pop("failure_domain", None) or "host",
                "min_size": attrs.pop("min_size", None)}
        attrs["ceph"] = ceph
        return attrs


class FileSystemSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(max_length=32, required=False, allow_blank=True,
                                  help_text="User (name or uid) who owns the root.")
    group = serializers.CharField(max_length=32, required=False, allow_blank=True,
                                  help_text="Group (name or gid) of the root.")
    mode = serializers.RegexField(r"^[0-7]{3,4}$", required=False, allow_blank=True,
                                  help_text="Permission bits of the root, octal (e.g. 0770).")
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        required=False)
    origin = serializers.StringRelatedField(read_only=True, allow_null=True)
    quota_bytes = serializers.IntegerField(min_value=1, max_value=INT64, required=False,
                                           allow_null=True)

    class Meta:
        model = FileSystem
        fields = ["id", "name", "pool", "quota_bytes", "owner", "group", "mode", "path",
                  "used_bytes", "origin", "kept_by", "state", "error", "created_at",
                  "updated_at"]
        read_only_fields = ["path", "used_bytes", "origin", "kept_by", "state", "error",
                            "created_at", "updated_at"]
        extra_kwargs = {"kept_by": {"help_text": (
            "The service that made this file system for its own use (object: the S3 "
            "gateway's data or cold tier; checkpoints: cold versions; vector: a collection's "
            "vectors and index); empty for yours.")}}

    def validate_pool(self, pool):
        if self.instance is not None and pool != self.instance.pool:
            raise serializers.ValidationError("A file system cannot move to another pool.")
        return pool

    def validate(self, attrs):
        if self.instance is not None and attrs.get("name", self.instance.name) != self.instance.name:
            raise serializers.ValidationError({"name": "A file system cannot be renamed."})
        pool = attrs.get("pool") or (self.instance.pool if self.instance else _default_pool())
        attrs["pool"] = pool
        quota = attrs.get("quota_bytes")
        if quota and pool.size_bytes and quota > pool.size_bytes:
            raise serializers.ValidationError({"quota_bytes": (
                f"Quota {quota} bytes is larger than pool {pool.name} "
                f"({pool.size_bytes} bytes).")})
        return attrs

    def validate_owner(self, owner):
        if owner:
            try:
                service.uid_of(owner)
            except KeyError:
                raise serializers.ValidationError(f"There is no user {owner} on this host.")
        return owner

    def validate_group(self, group):
        if group:
            try:
                service.gid_of(group)
            except KeyError:
                raise serializers.ValidationError(f"There is no group {group} on this host.")
        return group


class VolumeSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        required=False)
    origin = serializers.StringRelatedField(read_only=True, allow_null=True)
    size_bytes = volume_size_field()

    class Meta:
        model = Volume
        fields = ["id", "name", "pool", "size_bytes", "thin", "path", "used_bytes", "origin",
                  "state", "error", "created_at", "updated_at"]
        read_only_fields = ["thin", "path", "used_bytes", "origin", "state", "error",
                            "created_at", "updated_at"]

    def validate(self, attrs):
        if self.instance is not None:
            raise serializers.ValidationError(
                "Use the resize action to grow a volume; other fields cannot change.")
        attrs["pool"] = attrs.get("pool") or _default_pool()
        check_size(attrs["size_bytes"], attrs["pool"])
        return attrs


class ResizeSerializer(serializers.Serializer):
    """Body of POST /volumes/{name}/resize/; context: the ``volume``."""

    size_bytes = volume_size_field()

    def validate_size_bytes(self, size):
        return check_size(size, self.context["volume"].pool)


class SnapshotSerializer(serializers.ModelSerializer):
    filesystem = serializers.SlugRelatedField(slug_field="name", required=False,
                                              allow_null=True,
                                              queryset=FileSystem.objects.all())
    volume = serializers.SlugRelatedField(slug_field="name", required=False, allow_null=True,
                                          queryset=Volume.objects.all())
    clones = serializers.SerializerMethodField()

    class Meta:
        model = Snapshot
        fields = ["id", "name", "filesystem", "volume", "path", "state", "error", "clones",
                  "created_at"]
        read_only_fields = ["path", "state", "error", "created_at"]
        validators = []  # uniqueness per source is checked in validate() with a clear message

    def get_clones(self, snap) -> list[str]:
        return [c.name for c in snap.clones()]

    def validate(self, attrs):
        if self.instance is not None:
            raise serializers.ValidationError("Snapshots are read-only; delete and take anew.")
        if bool(attrs.get("filesystem")) == bool(attrs.get("volume")):
            raise serializers.ValidationError(
                "Give exactly one of 'filesystem' or 'volume' to snapshot.")
        source = attrs.get("filesystem") or attrs.get("volume")
        if source.snapshots.filter(name=attrs["name"]).exists():
            raise serializers.ValidationError(
                {"name": f"{source.name} already has a snapshot named {attrs['name']}."},
                code="unique")
        return attrs


class CloneSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[a-z0-9][a-z0-9._-]{0,62}$", max_length=63)
    size_bytes = volume_size_field(required=False)
    quota_bytes = serializers.IntegerField(min_value=1, max_value=INT64, required=False)

    def validate_size_bytes(self, size):
        volume = self.context["snapshot"].volume
        return check_size(size, volume.pool) if volume is not None else size

    def validate_name(self, name):
        snap = self.context["snapshot"]
        model = FileSystem if snap.filesystem_id else Volume
        if model.objects.filter(name=name).exists():
            raise serializers.ValidationError(f"{name} already exists.", code="unique")
        return name


def _default_pool() -> Pool:
    pool = Pool.objects.filter(name="default").first()
    if pool is None:
        raise serializers.ValidationError({"pool": "No pool given and no pool named default."})
    return pool


class CephKeySerializer(serializers.ModelSerializer):
    """A native CephFS key of a file system (its secret only in the answer that makes it)."""

    filesystem = serializers.StringRelatedField(read_only=True)
    mount = serializers.SerializerMethodField(
        help_text="How a host mounts the file system with this key: kernel (mount -t ceph) "
                  "and ceph-fuse commands, and the secret or keyring file they read "
                  "(<SECRET> stands for the secret, shown once).")

    class Meta:
        model = CephClientKey
        fields = ["id", "name", "filesystem", "entity", "read_only", "caps", "path",
                  "ceph_filesystem", "monitors", "msgr2_only", "mount", "created_at"]
        read_only_fields = ["entity", "caps", "path", "ceph_filesystem", "monitors",
                            "msgr2_only", "created_at"]
        extra_kwargs = {"read_only": {"help_text": "A key that can read but not write."},
                        "msgr2_only": {"help_text": "The monitors speak msgr2 only: a "
                                                    "kernel client mounts with ms_mode="
                                                    "prefer-crc (Linux 5.11 and later)."}}
        validators = []   # one name per file system: checked by the service (409)

    def get_mount(self, key) -> dict:
        return cephkeys.mount(key)

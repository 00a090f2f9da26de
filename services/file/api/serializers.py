import os
from dataclasses import asdict

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from services.file import service
from services.file.entries import export_entries
from services.file.models import NfsExport, SmbShare, SmbUser
from services.file.runtime import (
    FilesystemMissing,
    InvalidShareSpec,
    NfsClientRule,
    PathOutsideFilesystem,
)
from services.file.runtime import NfsExport as NfsExportSpec
from services.file.runtime import SmbShare as SmbShareSpec
from services.file.runtime.specs import check_user_name
from services.storage import service as storage
from services.storage.models import FileSystem

READ_ONLY = ["state", "error", "created_at", "updated_at"]


ANON_WORDS = {"anonuid": "anonymous_uid", "anongid": "anonymous_gid"}
CLIENT_SYNTAX = ("ADDRESS [rw|ro] [root_squash|all_squash|no_root_squash] "
                 "[anonuid=USER|UID] [anongid=GROUP|GID]")


def _parse_rule(text: str) -> dict:
    """``"10.0.0.0/24 rw root_squash anonuid=alice anongid=alice"`` as a rule dict."""
    words = [w for w in text.split() if "=" not in w]
    options = [w.split("=", 1) for w in text.split() if "=" in w]
    if not 1 <= len(words) <= 3 or any(k not in ANON_WORDS for k, _ in options):
        raise serializers.ValidationError(f"{text!r}: write {CLIENT_SYNTAX}")
    rule = dict(zip(("address", "access", "squash"), words))
    rule.update({ANON_WORDS[k]: v for k, v in options})
    return rule


def _id_of(value, lookup, what: str) -> int:
    """A uid/gid from a number or a user/group name of this host."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise serializers.ValidationError(f"{what} must be a number or a name, not {value!r}.")
    try:
        number = int(value) if isinstance(value, int) else lookup(value)
    except (KeyError, ValueError):
        raise serializers.ValidationError(f"{what} {value!r}: no such user or group on this "
                                          "host.") from None
    if not 0 <= number <= 0xFFFFFFFE:
        raise serializers.ValidationError(f"{what} {value!r} is out of range.")
    return number


@extend_schema_field(OpenApiTypes.OBJECT)
class ClientRuleField(serializers.Field):
    """A client rule: {"address", "access": rw|ro, "squash", "anonymous_uid"?,
    "anonymous_gid"?} (ids or user/group names) or the string
    "ADDRESS [rw|ro] [root_squash|all_squash|no_root_squash] [anonuid=U] [anongid=G]" (console,
    CLI). A squashed client acts as the anonymous ids: it writes where they may (make the file
    system theirs, or give the rule the file system owner's ids)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = _parse_rule(data)
        if not isinstance(data, dict) or not isinstance(data.get("address"), str):
            raise serializers.ValidationError(
                'A client is {"address": IP|CIDR|*, "access": rw|ro, "squash": ...}.')
        known = {"address", "access", "squash", "anonymous_uid", "anonymous_gid"}
        extra = set(data) - known
        if extra:
            raise serializers.ValidationError(f"Unknown client field(s): {sorted(extra)}.")
        data = dict(data)
        if "anonymous_uid" in data:
            data["anonymous_uid"] = _id_of(data["anonymous_uid"], storage.uid_of, "anonymous_uid")
        if "anonymous_gid" in data:
            data["anonymous_gid"] = _id_of(data["anonymous_gid"], storage.gid_of, "anonymous_gid")
        try:
            return asdict(NfsClientRule(**data))
        except (InvalidShareSpec, TypeError) as exc:
            raise serializers.ValidationError(str(exc))

    def to_representation(self, value):
        return value


def _check_path(fs, path):
    """The path relative to the file system root, or a field error a user can act on."""
    try:
        return service.relative_path(fs, path or "")
    except PathOutsideFilesystem as exc:
        raise serializers.ValidationError({"path": str(exc)})
    except FilesystemMissing as exc:
        field = "path" if path else "filesystem"
        raise serializers.ValidationError({field: str(exc)})


def _filesystem(attrs, instance):
    fs = attrs.get("filesystem") or (instance.filesystem if instance else None)
    if instance is not None and fs.pk != instance.filesystem_id:
        raise serializers.ValidationError(
            {"filesystem": "An export or share cannot move to another file system; "
                           "delete it and create a new one."})
    return fs


# one node serving an export (services.file.entries)
ENTRY = {"type": "object", "properties": {
    "node": {"type": "string"}, "address": {"type": "string"}, "port": {"type": "integer"},
    "state": {"type": "string", "description": "up or down"}, "mount": {"type": "string"}}}


class NfsExportSerializer(serializers.ModelSerializer):
    filesystem = serializers.SlugRelatedField(
        slug_field="name", queryset=FileSystem.objects.filter(kept_by=""),
        error_messages={"does_not_exist": "File system {value} does not exist "
                                          "(was it deleted?)."})
    path = serializers.CharField(required=False, allow_blank=True, default="")
    pseudo = serializers.CharField(required=False, validators=[],
                                   help_text="default: /<filesystem>")
    clients = serializers.ListField(child=ClientRuleField(), min_length=1,
                                    help_text="who may mount; at least one rule")
    entries = serializers.SerializerMethodField(
        help_text="one per node serving it: node, address, port, state (up/down), mount")
    recommended = serializers.SerializerMethodField(
        help_text="the entry to use (exports spread over the nodes that are up)")
    mount = serializers.SerializerMethodField(
        help_text="mount recipes through the recommended entry: linux (NFSv4.1, nconnect)")

    class Meta:
        model = NfsExport
        fields = ["id", "filesystem", "path", "pseudo", "clients", "state", "error",
                  "entries", "recommended", "mount", "created_at", "updated_at"]
        read_only_fields = READ_ONLY

    def validate(self, attrs):
        fs = _filesystem(attrs, self.instance)
        if "path" in attrs or self.instance is None:
            attrs["path"] = _check_path(fs, attrs.get("path", ""))
        pseudo = attrs.get("pseudo") or (self.instance.pseudo if self.instance
                                         else "/" + fs.name)
        pseudo = pseudo.rstrip("/") or "/"
        try:
            NfsExportSpec(1, "/", pseudo, attrs.get("clients") or [])
        except InvalidShareSpec as exc:
            raise serializers.ValidationError({"pseudo": str(exc)})
        clash = NfsExport.objects.filter(pseudo=pseudo)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise serializers.ValidationError(
                {"pseudo": f"Pseudo path {pseudo} is used by another export; give another."})
        attrs["pseudo"] = pseudo
        return attrs

    def _where(self, obj) -> dict:
        if getattr(obj, "_entries", None) is None:
            obj._entries = export_entries(obj)
        return obj._entries

    @extend_schema_field({"type": "array", "items": ENTRY})
    def get_entries(self, obj):
        return self._where(obj)["entries"]

    @extend_schema_field({**ENTRY, "nullable": True})
    def get_recommended(self, obj):
        return self._where(obj)["recommended"]

    @extend_schema_field({"type": "object", "properties": {"linux": {"type": "string"}}})
    def get_mount(self, obj):
        return self._where(obj)["mount"]


class SmbShareSerializer(serializers.ModelSerializer):
    filesystem = serializers.SlugRelatedField(
        slug_field="name", queryset=FileSystem.objects.filter(kept_by=""),
        error_messages={"does_not_exist": "File system {value} does not exist "
                                          "(was it deleted?)."})
    name = serializers.CharField(max_length=80, validators=[])
    path = serializers.CharField(required=False, allow_blank=True, default="")
    valid_users = serializers.ListField(child=serializers.CharField(), required=False,
                                        default=list,
                                        help_text="SMB users allowed; empty: every SMB user")
    grant_access = serializers.BooleanField(
        write_only=True, required=False, default=False,
        help_text="give the valid users read and write on the share's directory (POSIX ACL, "
                  "inherited by what they create); needs valid_users")

    class Meta:
        model = SmbShare
        fields = ["id", "name", "filesystem", "path", "read_only", "valid_users", "encrypt",
                  "grant_access", "state", "error", "created_at", "updated_at"]
        read_only_fields = READ_ONLY

    def validate_name(self, name):
        if self.instance is not None and name != self.instance.name:
            raise serializers.ValidationError("A share cannot be renamed.")
        try:
            SmbShareSpec(name=name, path="/")
        except InvalidShareSpec as exc:
            raise serializers.ValidationError(str(exc))
        clash = SmbShare.objects.filter(name__iexact=name)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise serializers.ValidationError(
                f"A share named {clash.first().name} exists (SMB share names ignore case).")
        return name

    def validate_valid_users(self, users):
        known = set(SmbUser.objects.filter(username__in=users)
                    .values_list("username", flat=True))
        missing = [u for u in users if u not in known]
        if missing:
            raise serializers.ValidationError(
                f"Unknown SMB user(s) {', '.join(missing)}: create them at "
                "/api/v1/smb-users/ first.")
        return list(dict.fromkeys(users))

    def validate(self, attrs):
        fs = _filesystem(attrs, self.instance)
        if "path" in attrs or self.instance is None:
            attrs["path"] = _check_path(fs, attrs.get("path", ""))
        path = attrs.get("path", self.instance.path if self.instance else "")
        users = attrs.get("valid_users", self.instance.valid_users if self.instance else [])
        target = service.share_path(fs, path)
        if attrs.get("grant_access"):
            if not users:
                raise serializers.ValidationError(
                    {"grant_access": "Name the valid users to grant access to."})
            target = os.path.dirname(target.rstrip("/")) or "/"  # the grant opens the last one
        blocked = service.unreachable_by_users(target, users)
        if blocked:
            raise serializers.ValidationError({"path": (
                f"SMB users cannot reach this directory: {blocked} is not searchable by "
                "them; give the file system to them (owner, group, mode), allow others "
                "(chmod o+x), or choose a directory they can reach.")})
        return attrs


class SmbUserSerializer(serializers.ModelSerializer):
    password = serializers.CharField(write_only=True, trim_whitespace=False,
                                     style={"input_type": "password"})

    class Meta:
        model = SmbUser
        fields = ["id", "username", "password", "state", "error", "created_at", "updated_at"]
        read_only_fields = READ_ONLY
        extra_kwargs = {"username": {"validators": []}}

    def validate_username(self, name):
        if self.instance is not None and name != self.instance.username:
            raise serializers.ValidationError("An SMB user cannot be renamed.")
        try:
            check_user_name(name)
        except InvalidShareSpec as exc:
            raise serializers.ValidationError(str(exc))
        if self.instance is None and SmbUser.objects.filter(username=name).exists():
            raise serializers.ValidationError(f"SMB user {name} exists.")
        return name

    def validate_password(self, password):
        if not password or "\n" in password or "\r" in password:
            raise serializers.ValidationError("A password is one non-empty line.")
        return password

from rest_framework import serializers

from dataplane.errors import DataplaneError
from dataplane.spdk.dhchap import check_dhchap_key
from services.block.attach import ACCELS
from services.block.models import BlockExport, Host, HostGroup
from services.block.transports.base import (
    QOS_LIMIT_MAX,
    InvalidExport,
    check_host_address,
    check_initiator_name,
)
from services.block.transports.iscsi import DEFAULT_IQN_BASE
from services.storage.models import NAME_RE, Volume

IQN_PREFIXES = ("iqn.", "eui.", "naa.")
CHAP_HELP = "CHAP secrets are 12 to 16 characters (iSCSI initiators reject others)."
CONNECTION_KEYS = ("target_iqn", "portal", "lun", "name", "host", "port", "uri", "socket",
                   "subsystem_nqn", "trtype", "traddr", "trsvcid", "nsid", "paths", "removed")


def _check_chap(attrs, instance, user_key, secret_key, errors_label):
    user = attrs.get(user_key, getattr(instance, user_key, "") if instance else "")
    secret = attrs.get(secret_key, getattr(instance, secret_key, "") if instance else "")
    if user and not secret:
        raise serializers.ValidationError({secret_key: f"{errors_label}: give a secret with "
                                                       f"{user_key}. {CHAP_HELP}"})
    if secret and not user:
        raise serializers.ValidationError({user_key: f"{errors_label}: give a user name with "
                                                     f"{secret_key}."})
    if secret and not 12 <= len(secret) <= 16:
        raise serializers.ValidationError({secret_key: CHAP_HELP})


def _checked(check, value, *args):
    try:
        return check(value, *args)
    except InvalidExport as exc:
        raise serializers.ValidationError(str(exc)) from None


class HostSerializer(serializers.ModelSerializer):
    chap_secret = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                        max_length=16, help_text=CHAP_HELP)
    dhchap_key = serializers.CharField(
        write_only=True, required=False, allow_blank=True, max_length=100,
        help_text="The NVMe host's DH-HMAC-CHAP secret, DHHC-1:00:<base64>: (`nvme "
                  "gen-dhchap-key`); its NVMe-oF exports then admit it only with that key.")
    groups = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = Host
        fields = ["id", "name", "iqn", "nqn", "address", "chap_user", "chap_secret",
                  "dhchap_key", "groups", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]

    # A host is one machine: a wildcard (tgtd's ALL, a network, *) would open its groups'
    # targets to every initiator without the export's allow_any, so it is refused here and
    # again by the transport (services.block.transports.base)
    def validate_iqn(self, iqn):
        iqn = _checked(check_initiator_name, iqn, "iqn") if iqn else iqn
        if iqn and not iqn.lower().startswith(IQN_PREFIXES):
            raise serializers.ValidationError(
                "An iSCSI initiator name starts with iqn., eui. or naa. "
                "(e.g. iqn.1994-05.com.redhat:db1; see /etc/iscsi/initiatorname.iscsi).")
        return iqn

    def validate_nqn(self, nqn):
        nqn = _checked(check_initiator_name, nqn, "nqn") if nqn else nqn
        if nqn and not nqn.startswith("nqn."):
            raise serializers.ValidationError(
                "An NVMe host NQN starts with nqn. (see /etc/nvme/hostnqn).")
        return nqn

    def validate_dhchap_key(self, key):
        if not key:
            return key
        try:
            return check_dhchap_key(key)
        except DataplaneError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate_address(self, address):
        return _checked(check_host_address, address) if address else address

    def validate(self, attrs):
        inst = self.instance
        if inst is not None and attrs.get("name", inst.name) != inst.name:
            raise serializers.ValidationError({"name": "A host cannot be renamed."})
        iqn = attrs.get("iqn", self.instance.iqn if self.instance else "")
        nqn = attrs.get("nqn", self.instance.nqn if self.instance else "")
        address = attrs.get("address", self.instance.address if self.instance else "")
        if attrs.get("dhchap_key") and not nqn:
            raise serializers.ValidationError(
                {"dhchap_key": "A DH-HMAC-CHAP key belongs to an NVMe host: give its nqn too."})
        if not (iqn or nqn or address):
            raise serializers.ValidationError(
                "Give the host's iqn (iSCSI), nqn (NVMe-oF) or address, or several.")
        _check_chap(attrs, self.instance, "chap_user", "chap_secret", "CHAP")
        return attrs


class HostGroupSerializer(serializers.ModelSerializer):
    hosts = serializers.SlugRelatedField(slug_field="name", many=True, required=False,
                                         queryset=Host.objects.all())
    mutual_chap_secret = serializers.CharField(write_only=True, required=False,
                                               allow_blank=True, max_length=16,
                                               help_text=CHAP_HELP)
    target_iqn = serializers.SerializerMethodField()

    class Meta:
        model = HostGroup
        fields = ["id", "name", "hosts", "mutual_chap_user", "mutual_chap_secret",
                  "target_iqn", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]

    def get_target_iqn(self, group) -> str:
        return f"{DEFAULT_IQN_BASE}:{group.name}"

    def validate_name(self, name):
        if name == "any":
            raise serializers.ValidationError(
                "'any' is reserved for exports open to every initiator; pick another name.")
        if self.instance is not None and name != self.instance.name:
            raise serializers.ValidationError("A host group cannot be renamed.")
        return name

    def validate(self, attrs):
        _check_chap(attrs, self.instance, "mutual_chap_user", "mutual_chap_secret",
                    "Mutual CHAP")
        return attrs


class BlockExportSerializer(serializers.ModelSerializer):
    volume = serializers.SlugRelatedField(slug_field="name", queryset=Volume.objects.all())
    host_group = serializers.SlugRelatedField(slug_field="name", required=False,
                                              allow_null=True, queryset=HostGroup.objects.all())
    export_id = serializers.CharField(read_only=True)

    class Meta:
        model = BlockExport
        fields = ["id", "export_id", "volume", "protocol", "host_group", "allow_any",
                  "read_only", *BlockExport.QOS_FIELDS, "connection", "state", "error",
                  "created_at", "updated_at"]
        extra_kwargs = {"allow_any": {"help_text": (
            "Open to every initiator that reaches the address. iSCSI and NVMe-oF exports "
            "need a host_group unless this is true; NBD has no per-host access control, so "
            "an NBD export needs it true; vhost-user-blk (a local socket) ignores it.")},
            **{f: {"min_value": 0, "max_value": QOS_LIMIT_MAX, "help_text": (
                "Per second, 0 = unlimited; at most 10^15 (qemu-storage-daemon's bound).")}
               for f in BlockExport.QOS_FIELDS}}
        read_only_fields = ["connection", "state", "error", "created_at", "updated_at"]

    def to_representation(self, export):
        data = super().to_representation(export)
        for key in CONNECTION_KEYS:          # how to reach it, at the top level too
            if key in (export.connection or {}):
                data[key] = export.connection[key]
        return data

    def validate(self, attrs):
        inst = self.instance
        if inst is not None:
            for key in ("volume", "protocol"):
                if key in attrs and attrs[key] != getattr(inst, key):
                    raise serializers.ValidationError(
                        {key: f"An export's {key} cannot change; create a new export."})
        volume = attrs.get("volume") or inst.volume
        protocol = attrs.get("protocol") or inst.protocol
        group = attrs.get("host_group", inst.host_group if inst else None)
        qos = {k: attrs.get(k, getattr(inst, k) if inst else 0) for k in BlockExport.QOS_FIELDS}
        driver = volume.pool.driver
        if protocol == "nvmf" and driver not in ("spdk", "ceph"):
            raise serializers.ValidationError({"protocol": (
                "NVMe-oF exports need a volume on an spdk pool or a ceph pool; volume "
                f"{volume.name} is on pool {volume.pool.name} (driver {driver}). Use iscsi, nbd or "
                "vhost-user-blk, or put the volume on an spdk or ceph pool.")})
        if protocol != "nvmf" and driver == "spdk":
            raise serializers.ValidationError({"protocol": (
                f"Volume {volume.name} lives in spdk_tgt (pool {volume.pool.name}); "
                "export it with protocol nvmf.")})
        if protocol == "nvmf" and attrs.get("read_only", inst.read_only if inst else False):
            raise serializers.ValidationError({"read_only": (
                "Read-only NVMe-oF namespaces are not supported; export a clone of a "
                "snapshot instead.")})
        for kind in ("iops", "bps"):
            if qos[f"{kind}_total"] and (qos[f"{kind}_read"] or qos[f"{kind}_write"]):
                raise serializers.ValidationError({f"{kind}_total": (
                    f"{kind}_total limits reads and writes together; it cannot be combined "
                    f"with {kind}_read or {kind}_write. Give the total, or the read and write "
                    "limits (0 clears one).")})
        if protocol == "iscsi" and any(qos.values()):
            raise serializers.ValidationError({"protocol": (
                "tgtd has no per-LUN QoS; export over nbd or vhost-user-blk "
                "(qemu-storage-daemon) or nvmf (spdk pool) to limit I/O.")})
        if protocol in ("nbd", "vhost-user-blk") and group is not None:
            raise serializers.ValidationError({"host_group": (
                f"{protocol} exports have no per-host access control in qemu-storage-daemon; "
                "leave host_group empty (NBD listens on the appliance's block address only).")})
        allow_any = attrs.get("allow_any", inst.allow_any if inst else False)
        if allow_any and group is not None:
            raise serializers.ValidationError({"allow_any": (
                "Give a host_group (only its hosts) or allow_any (every initiator), not both.")})
        if protocol in ("iscsi", "nvmf") and group is None and not allow_any:
            raise serializers.ValidationError({"host_group": (
                f"An {protocol} export needs a host_group naming who may attach; to open it "
                "to every initiator that reaches the address, say so with allow_any: true.")})
        if protocol == "nbd" and not allow_any:
            raise serializers.ValidationError({"allow_any": (
                "NBD has no per-host access control: every client that reaches the block "
                "address can attach. Say so with allow_any: true, or use iSCSI with a host "
                "group, or vhost-user-blk for a VM on this machine.")})
        return attrs


class AttachQuerySerializer(serializers.Serializer):
    """Query of GET /block-exports/{id}/attach/."""

    host = serializers.RegexField(NAME_RE, max_length=63, required=False, help_text=(
        "The host (of the export's host group) that attaches it: its initiator name and CHAP "
        "user go into the recipe. Default: the group's first host with CHAP, else its first."))
    accel = serializers.ChoiceField(choices=list(ACCELS), default="tcg", help_text=(
        "tcg: <domain type='qemu'> and -accel tcg (runs anywhere); kvm on hosts with KVM."))
    vm_name = serializers.RegexField(NAME_RE, max_length=63, default="strata-vm",
                                     help_text="The domain's name in the example.")
    memory_mib = serializers.IntegerField(min_value=128, max_value=1 << 20, default=512,
                                          help_text="Guest memory of the example (MiB).")


class AttachSecretSerializer(serializers.Serializer):
    usage = serializers.CharField(help_text="libvirt secret usage name the <auth> refers to")
    uuid = serializers.CharField()
    xml = serializers.CharField(help_text="virsh secret-define this (holds no secret)")
    file = serializers.CharField(help_text="where the setup puts the CHAP secret for QEMU")


class AttachLibvirtSerializer(serializers.Serializer):
    disk = serializers.CharField(help_text="the <disk> element")
    domain = serializers.CharField(help_text="a whole minimal <domain> using that disk")
    secret = AttachSecretSerializer(allow_null=True)


class AttachQemuSerializer(serializers.Serializer):
    args = serializers.ListField(child=serializers.CharField(),
                                 help_text="-drive/-device/-object/-chardev arguments")
    command = serializers.CharField(help_text="a whole qemu-system-x86_64 command line")


class AttachRecipeSerializer(serializers.Serializer):
    export_id = serializers.CharField()
    protocol = serializers.CharField()
    volume = serializers.CharField()
    client = serializers.CharField(allow_null=True)
    libvirt = AttachLibvirtSerializer()
    qemu = AttachQemuSerializer()
    setup = serializers.ListField(child=serializers.CharField(),
                                  help_text="shell commands to run once on the hypervisor")
    notes = serializers.ListField(child=serializers.CharField())

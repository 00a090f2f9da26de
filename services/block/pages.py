"""Console pages of the block service: hosts, host groups and block exports."""
from plane.pages import Action, Column, FormField, Page
from services.block.models import BlockExport, Host, HostGroup
from services.storage.models import Volume

PROTOCOLS = ["iscsi", "nbd", "vhost-user-blk", "nvmf"]
QOS_FORM = [FormField("iops_read", "Read IOPS limit", "number", help="0 = unlimited"),
            FormField("iops_write", "Write IOPS limit", "number", help="0 = unlimited"),
            FormField("bps_read", "Read limit (bytes/s)", "bytes", help="0 = unlimited"),
            FormField("bps_write", "Write limit (bytes/s)", "bytes", help="0 = unlimited")]


def host_names() -> list[str]:
    return list(Host.objects.values_list("name", flat=True))


def group_names() -> list[str]:
    return list(HostGroup.objects.values_list("name", flat=True))


def volume_names() -> list[str]:
    return list(Volume.objects.values_list("name", flat=True))


class _Reach:
    """How to reach an export, as one line for the table."""

    @staticmethod
    def line(export: BlockExport) -> str:
        c = export.connection or {}
        if "target_iqn" in c:
            return f"{c['portal']} {c['target_iqn']} LUN {c.get('lun')}"
        if "uri" in c:
            return c["uri"]
        if "socket" in c:
            return c["socket"]
        if "subsystem_nqn" in c:
            return f"{c['traddr']}:{c['trsvcid']} {c['subsystem_nqn']}"
        return ""


def exports():
    rows = list(BlockExport.objects.select_related("volume", "host_group"))
    for e in rows:
        e.reach = _Reach.line(e)
    return rows


PAGES = [
    Page(slug="hosts", title="Hosts", group="Block", api="/api/v1/hosts/",
         queryset=lambda: Host.objects.prefetch_related("groups"),
         help="A client machine: its iSCSI initiator name (IQN), NVMe host NQN, address and "
              "CHAP login. Hosts join host groups, which see exports.",
         columns=[Column("name", "Name"), Column("iqn", "Initiator IQN"),
                  Column("nqn", "Host NQN"), Column("address", "Address"),
                  Column("chap_user", "CHAP user"), Column("groups", "Groups", "list")],
         form=[FormField("name", "Name", required=True),
               FormField("iqn", "Initiator IQN", help="From /etc/iscsi/initiatorname.iscsi"),
               FormField("nqn", "Host NQN", help="From /etc/nvme/hostnqn"),
               FormField("address", "Address", help="Admit any initiator from this address"),
               FormField("chap_user", "CHAP user"),
               FormField("chap_secret", "CHAP secret", "password",
                         help="12 to 16 characters")],
         actions=[Action("Set CHAP", "/api/v1/hosts/{key}/", method="PATCH",
                         fields=[FormField("chap_user", "CHAP user"),
                                 FormField("chap_secret", "CHAP secret", "password")])]),
    Page(slug="host-groups", title="Host groups", group="Block", api="/api/v1/host-groups/",
         queryset=lambda: HostGroup.objects.prefetch_related("hosts"),
         help="Hosts that see the same LUNs: one iSCSI target per group, whose ACL is the "
              "group's hosts.",
         columns=[Column("name", "Name"), Column("hosts", "Hosts", "list"),
                  Column("mutual_chap_user", "Mutual CHAP user")],
         form=[FormField("name", "Name", required=True),
               FormField("hosts", "Hosts", "lines", help="One host name a line."),
               FormField("mutual_chap_user", "Mutual CHAP user"),
               FormField("mutual_chap_secret", "Mutual CHAP secret", "password",
                         help="12 to 16 characters")],
         actions=[Action("Set hosts", "/api/v1/host-groups/{key}/", method="PATCH",
                         fields=[FormField("hosts", "Hosts", "lines", required=True,
                                           help="One host name a line.")])]),
    Page(slug="block-exports", title="Block exports", group="Block",
         api="/api/v1/block-exports/", lookup="id", queryset=exports,
         detail="/console/block-exports/",
         help="A volume reachable over iSCSI (tgtd), NBD or vhost-user-blk "
              "(qemu-storage-daemon), or NVMe-oF (spdk pools). QoS limits change live.",
         columns=[Column("id", "Id"), Column("volume.name", "Volume"),
                  Column("protocol", "Protocol"), Column("host_group.name", "Host group"),
                  Column("allow_any", "Open to any initiator"),
                  Column("read_only", "Read-only"), Column("reach", "Connect to"),
                  Column("state", "State", "state"), Column("error", "Error")],
         form=[FormField("volume", "Volume", "select", choices=volume_names, required=True),
               FormField("protocol", "Protocol", "select", choices=PROTOCOLS, default="iscsi"),
               FormField("host_group", "Host group", "select", choices=group_names,
                         help="iSCSI/NVMe-oF: only these hosts may attach."),
               FormField("allow_any", "Open to any initiator", "checkbox",
                         help="Warning: every initiator that reaches the address may attach "
                              "(NBD cannot limit by host, so it needs this)."),
               FormField("read_only", "Read-only", "checkbox")],
         actions=[Action("Set QoS", "/api/v1/block-exports/{key}/", method="PATCH",
                         fields=QOS_FORM)]),
]

"""Attach recipes: how a hypervisor gives a VM a block export, for libvirt and for QEMU.

From an export's connection info (what the transports return) and the client host that
attaches it, render a libvirt ``<disk>`` element, a whole minimal ``<domain>`` around it,
and the equivalent ``qemu-system-x86_64`` arguments. CHAP secrets never appear: libvirt
refers to a secret object by its usage name (defined once on the hypervisor with
``virsh secret-define`` / ``secret-set-value``), QEMU reads a ``secret`` object from a file
the operator writes. No Django here: the API, the CLI and the console only print this.
"""
from __future__ import annotations

import shlex
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from plumbing.errors import Invalid

ACCELS = ("tcg", "kvm")
DISK_ID = "strata0"              # QEMU id of the drive / chardev in the recipe


@dataclass
class Client:
    """The host that attaches the export: its iSCSI initiator name, NVMe host NQN and CHAP
    user (never the secret), and whether it has a DH-HMAC-CHAP key (never the key)."""

    name: str
    iqn: str = ""
    nqn: str = ""
    chap_user: str = ""
    dhchap: bool = False


def secret_usage(client: Client) -> str:
    """The libvirt secret's usage name (and the QEMU secret file's stem) for a host's CHAP."""
    return f"strata-chap-{client.name}"


def secret_uuid(client: Client) -> str:
    """A stable UUID for the host's libvirt secret, so the commands can name it."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"strata:chap:{client.name}"))


def recipe(export: dict, client: Client | None = None, *, accel: str = "tcg",
           vm_name: str = "strata-vm", memory_mib: int = 512) -> dict:
    """The attach recipe of ``export`` (``export_id``, ``protocol``, ``volume``,
    ``read_only``, ``connection``) for ``client`` (iSCSI/NVMe-oF: a host of its group).

    Returns ``{"export_id", "protocol", "volume", "client", "libvirt": {"disk", "domain",
    "secret"}, "qemu": {"args", "command"}, "setup", "notes"}``; ``setup`` lists shell
    commands to run once on the hypervisor before the VM starts.
    """
    if accel not in ACCELS:
        raise Invalid(f"accel must be one of {', '.join(ACCELS)}, not {accel!r}")
    protocol, conn = export["protocol"], export.get("connection") or {}
    render = {"nbd": _nbd, "vhost-user-blk": _vhost_user, "iscsi": _iscsi,
              "nvmf": _nvmf}.get(protocol)
    if render is None:
        raise Invalid(f"no attach recipe for protocol {protocol!r}")
    if not conn:
        raise Invalid(f"export {export['export_id']} is not online (no connection info); "
                      "fix its error first")
    out = {"setup": [], "notes": [], "secret": None}
    disk, args = render(export, conn, client, out)
    if export.get("read_only"):
        ET.SubElement(disk, "readonly")
    domain = _domain(vm_name, memory_mib, accel, disk, shared_memory=protocol == "vhost-user-blk")
    head = ["qemu-system-x86_64", "-machine", f"q35,accel={accel}", "-m", f"{memory_mib}M",
            "-nographic"]
    if protocol == "vhost-user-blk":
        args = ["-object", f"memory-backend-memfd,id=mem0,size={memory_mib}M,share=on",
                "-numa", "node,memdev=mem0", *args]
    return {"export_id": export["export_id"], "protocol": protocol,
            "volume": export.get("volume", ""), "client": client.name if client else None,
            "libvirt": {"disk": _xml(disk), "domain": _xml(domain), "secret": out["secret"]},
            "qemu": {"args": args, "command": shlex.join(head + args)},
            "setup": out["setup"], "notes": out["notes"]}


# -- per protocol ---------------------------------------------------------------------------

def _disk(kind: str, source_attrs: dict, serial: str | None) -> tuple[ET.Element, ET.Element]:
    disk = ET.Element("disk", type=kind, device="disk")
    ET.SubElement(disk, "driver", name="qemu", type="raw",
                  **({"cache": "none"} if kind != "vhostuser" else {}))
    source = ET.SubElement(disk, "source", **source_attrs)
    ET.SubElement(disk, "target", dev="vda", bus="virtio")
    if serial:
        ET.SubElement(disk, "serial").text = serial
    return disk, source


def _nbd(export, conn, client, out):
    disk, source = _disk("network", {"protocol": "nbd", "name": conn["name"]},
                         export["export_id"])
    ET.SubElement(source, "host", name=conn["host"], port=str(conn["port"]))
    ro = ",readonly=on" if export.get("read_only") else ""
    args = ["-drive", f"file={conn['uri']},if=none,id={DISK_ID},format=raw,cache=none{ro}",
            "-device", f"virtio-blk-pci,drive={DISK_ID},serial={export['export_id']}"]
    out["notes"].append("NBD has no per-host access control: any client that reaches "
                        f"{conn['host']}:{conn['port']} can attach this export.")
    return disk, args


def _vhost_user(export, conn, client, out):
    disk, source = _disk("vhostuser", {"type": "unix", "path": conn["socket"]}, None)
    ET.SubElement(source, "reconnect", enabled="yes", timeout="10")
    args = ["-chardev", f"socket,id={DISK_ID},path={conn['socket']},reconnect=1",
            "-device", f"vhost-user-blk-pci,chardev={DISK_ID}"]
    out["notes"].append("vhost-user-blk is a unix socket on the appliance: the VM must run "
                        "on the same machine, its guest RAM shared (the memfd backend above; "
                        "<memoryBacking> in libvirt), and the QEMU process (libvirt's "
                        "qemu user) must be allowed to open the socket.")
    return disk, args


def _iscsi(export, conn, client, out):
    host, port = conn["portal"].rsplit(":", 1)
    iqn, lun = conn["target_iqn"], conn["lun"]
    disk, source = _disk("network", {"protocol": "iscsi", "name": f"{iqn}/{lun}"},
                         export["export_id"])
    ET.SubElement(source, "host", name=host, port=port)
    drive = [f"driver=iscsi,transport=tcp,portal={conn['portal']},target={iqn},lun={lun}"]
    if client and client.iqn:
        ET.SubElement(ET.SubElement(source, "initiator"), "iqn", name=client.iqn)
        drive.append(f"initiator-name={client.iqn}")
    args = []
    if client and client.chap_user:
        usage, sid = secret_usage(client), f"{DISK_ID}-chap"
        auth = ET.SubElement(source, "auth", username=client.chap_user)
        ET.SubElement(auth, "secret", type="iscsi", usage=usage)
        secret = ET.Element("secret", ephemeral="no", private="yes")
        ET.SubElement(secret, "uuid").text = secret_uuid(client)
        ET.SubElement(secret, "description").text = f"iSCSI CHAP secret of host {client.name}"
        ET.SubElement(ET.SubElement(secret, "usage", type="iscsi"), "target").text = usage
        path = f"/etc/strata/{usage}"
        out["secret"] = {"usage": usage, "uuid": secret_uuid(client), "xml": _xml(secret),
                         "file": path}
        out["setup"] += [
            f"install -d -m 0700 /etc/strata && install -m 0600 /dev/null {path}",
            f"printf %s \"$CHAP_SECRET\" > {path}    # host {client.name}'s CHAP secret, "
            "no newline",
            f"virsh secret-define {usage}.xml        # the secret XML above",
            f"virsh secret-set-value {secret_uuid(client)} --file {path} --plain"]
        args += ["-object", f"secret,id={sid},file={path}"]
        drive += [f"user={client.chap_user}", f"password-secret={sid}"]
        out["notes"].append("The CHAP secret is never shown: write host "
                            f"{client.name}'s secret to {path} and define the libvirt "
                            "secret (setup); libvirt and QEMU do no mutual CHAP.")
    elif client is None:
        out["notes"].append("This target admits every initiator (allow_any): no CHAP.")
    ro = ",readonly=on" if export.get("read_only") else ""
    args += ["-drive", ",".join(drive) + f",if=none,id={DISK_ID},cache=none{ro}",
             "-device", f"virtio-blk-pci,drive={DISK_ID},serial={export['export_id']}"]
    return disk, args


def _nvmf(export, conn, client, out):
    device = f"/dev/nvme0n{conn['nsid']}"
    disk, _source = _disk("block", {"dev": device}, export["export_id"])
    hostnqn = f" --hostnqn={client.nqn}" if client and client.nqn else ""
    if client and client.dhchap:
        hostnqn += ' --dhchap-secret="$(cat /etc/nvme/strata-dhchap-key)"'
        out["notes"].append("The host authenticates with DH-HMAC-CHAP: put its key (the one "
                            "given to Strata, DHHC-1:...) in /etc/nvme/strata-dhchap-key, "
                            "mode 0600, before connecting.")
    paths = conn.get("paths") or [conn]
    out["setup"] += ["modprobe nvme-tcp"] + [
        f"nvme connect -t tcp -a {p['traddr']} -s {p['trsvcid']} "
        f"-n {conn['subsystem_nqn']}{hostnqn}" for p in paths]
    if len(paths) > 1:
        out["notes"].append(
            f"{len(paths)} paths, one per node (ANA: "
            + ", ".join(f"{p['node']} {p['ana_state']}" for p in paths)
            + "): connect every one; the kernel's native NVMe multipath "
            "(nvme_core.multipath=Y) joins them into one device and moves to another path "
            "when a node fails. Boot the hypervisor with nvme_core.io_timeout=120 or more.")
    args = ["-drive", f"file={device},if=none,id={DISK_ID},format=raw,cache=none,aio=native",
            "-device", f"virtio-blk-pci,drive={DISK_ID},serial={export['export_id']}"]
    out["notes"].append("QEMU and libvirt have no NVMe-oF initiator: the hypervisor host "
                        f"connects with nvme-cli (setup), then gives the VM the namespace's "
                        f"block device ({device} here; `nvme list` shows which it is).")
    return disk, args


# -- the domain -----------------------------------------------------------------------------

def _domain(name: str, memory_mib: int, accel: str, disk: ET.Element,
            shared_memory: bool) -> ET.Element:
    dom = ET.Element("domain", type="qemu" if accel == "tcg" else "kvm")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = str(memory_mib)
    ET.SubElement(dom, "vcpu").text = "1"
    if shared_memory:
        backing = ET.SubElement(dom, "memoryBacking")
        ET.SubElement(backing, "source", type="memfd")
        ET.SubElement(backing, "access", mode="shared")
    os_ = ET.SubElement(dom, "os")
    ET.SubElement(os_, "type", arch="x86_64", machine="q35").text = "hvm"
    ET.SubElement(os_, "boot", dev="hd")
    features = ET.SubElement(dom, "features")
    ET.SubElement(features, "acpi")
    ET.SubElement(features, "apic")
    ET.SubElement(dom, "on_poweroff").text = "destroy"
    devices = ET.SubElement(dom, "devices")
    devices.append(disk)
    ET.SubElement(devices, "serial", type="pty")
    ET.SubElement(devices, "console", type="pty")
    return dom


def _xml(element: ET.Element) -> str:
    element = ET.fromstring(ET.tostring(element))    # a copy: indent() changes text
    ET.indent(element, "  ")
    return ET.tostring(element, encoding="unicode") + "\n"

"""The CSI node plugin in a real TCG guest: a whole Debian system (NFS, open-iscsi, nvme-cli,
e2fsprogs, xfsprogs) booted from a disk made once per machine, reached over its network.

The disk: the Debian root of ``scripts/build-debian-root.sh`` with the cloud kernel's modules
(``/lib/modules/<release>``) and a venv holding grpcio, protobuf and requests (installed offline
from a wheelhouse ``pip wheel`` made on the host), written into an ext4 image with
``mkfs.ext4 -d``; cached under ``/var/cache/strata/csi-guest-<key>.img`` (key: the root, the
kernel and the wheels) and never written to: each boot gets a qcow2 overlay. The guest boots
tests/guest.py's busybox initramfs, whose script mounts the disk, copies Strata's code of this
checkout in (so a changed plugin needs no new image), and switch_roots to ``/sbin/strata-init``:
modules, the network (a tap in the test's namespace, the default route via its host end, where
the session's Ceph cluster is reached), the node's IQN and host NQN, iscsid, then
``python -m services.csi --mode node --endpoint tcp://0.0.0.0:PORT``. The console is the boot's
log; the guest is killed (by PID) when the context ends."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import requests

from services.csi.proto import csi_pb2, csi_pb2_grpc
from tests.guest import Boot, Image

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("STRATA_ROOT_CACHE", "/var/cache/strata"))
WHEELS = ("grpcio", "protobuf", "requests")
MODULES = "virtio_net iscsi_tcp sd_mod nvme_tcp nfsv4 xfs ceph"
GUEST_INIT = f"""#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/lock
. /etc/strata-guest.env
hostname "$NAME"
for m in {MODULES}; do modprobe $m; done
ip link set lo up
ip link set eth0 up
ip addr add "$ADDRESS/24" dev eth0
ip route add default via "$GATEWAY"   # the host end: the session's Ceph cluster (10.78.0.1)
mkdir -p /etc/iscsi /etc/nvme
echo "InitiatorName=$IQN" > /etc/iscsi/initiatorname.iscsi
echo "$NQN" > /etc/nvme/hostnqn
iscsid
python3 /opt/strata/agent.py "$AGENT_PORT" &
echo "STRATA-NODE-UP $(cut -d' ' -f1 /proc/uptime)"
cd /opt/strata
while true; do   # the plugin again after a test stopped it (kill $(cat /run/csi.pid))
  /opt/csi/venv/bin/python -m services.csi --mode "$MODE" --endpoint "tcp://0.0.0.0:$PORT" \\
      --node-id "$NAME" --node-address "$ADDRESS" --log-level WARNING $PLANE &
  echo $! > /run/csi.pid
  wait $!
  echo "STRATA-NODE-PLUGIN-EXIT $?"
done
"""
# A test's hands in the guest (not part of the driver): runs one command per connection,
# {"argv", "stdin" (hex)} -> {"rc", "out" (hex), "err"}; the tests write and read with it.
AGENT = """import json, socketserver, subprocess, sys


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        req = json.loads(self.rfile.readline())
        try:
            done = subprocess.run(req["argv"], input=bytes.fromhex(req.get("stdin", "")),
                                  capture_output=True, timeout=req.get("timeout", 300))
            out = {"rc": done.returncode, "out": done.stdout.hex(),
                   "err": done.stderr.decode(errors="replace")}
        except Exception as exc:
            out = {"rc": -1, "out": "", "err": repr(exc)}
        self.wfile.write(json.dumps(out).encode() + b"\\n")


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""
# run by tests/guest.py's /init (PID 1's shell): the disk, this checkout's code, then the system
SWITCH = """mkdir -p /newroot
mount -t ext4 /dev/vda /newroot
mkdir -p /newroot/opt/strata
cp -a /strata/. /newroot/opt/strata/
cp /guest.env /newroot/etc/strata-guest.env
cp /guest-init /newroot/sbin/strata-init
chmod 755 /newroot/sbin/strata-init
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/strata-init
"""
CODE = ("plumbing", "services/__init__.py", "services/csi")


def root_folder() -> Path:
    """The Debian root (built once per machine; waits while another process builds it)."""
    out = subprocess.run([str(ROOT / "scripts" / "build-debian-root.sh")], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"build-debian-root.sh failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _versions() -> dict:
    from importlib.metadata import version
    return {name: version(name) for name in WHEELS}


def disk_image(kernel_release: str) -> Path:
    """The guest's base disk (built once per machine, under a lock)."""
    root = root_folder()
    versions = _versions()
    key = hashlib.sha256(repr((str(root), kernel_release, sorted(versions.items())))
                         .encode()).hexdigest()[:12]
    image = CACHE / f"csi-guest-{key}.img"
    if image.exists():
        return image
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".csi-guest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if image.exists():
            return image
        work = CACHE / f"csi-guest-{key}.tmp.{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            _build(root, kernel_release, versions, work, image)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return image


def _build(root: Path, release: str, versions: dict, work: Path, image: Path) -> None:
    stage = work / "root"
    work.mkdir(parents=True)
    subprocess.run(["cp", "-a", f"{root}/.", str(stage)], check=True)
    shutil.copytree(f"/lib/modules/{release}", stage / "lib" / "modules" / release,
                    symlinks=True, dirs_exist_ok=True)
    wheels = stage / "opt" / "csi" / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--only-binary", ":all:",
                    "-w", str(wheels)] + [f"{n}=={v}" for n, v in versions.items()],
                   check=True, capture_output=True, timeout=600)
    subprocess.run(["chroot", str(stage), "python3", "-m", "venv", "/opt/csi/venv"],
                   check=True, capture_output=True, timeout=300)
    subprocess.run(["chroot", str(stage), "/opt/csi/venv/bin/pip", "install", "-q",
                    "--no-index", "--find-links", "/opt/csi/wheels"] + list(versions),
                   check=True, capture_output=True, timeout=600)
    shutil.rmtree(wheels)
    size = int(subprocess.run(["du", "-sb", str(stage)], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    tmp = work / "disk.img"
    subprocess.run(["truncate", "-s", str(size + size // 2 + (256 << 20)), str(tmp)],
                   check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "strata-csi", "-d", str(stage), str(tmp)],
                   check=True, capture_output=True, timeout=900)
    os.replace(tmp, image)


def _code_files() -> dict:
    files = {}
    for rel in CODE:
        path = ROOT / rel
        for p in ([path] if path.is_file() else sorted(path.rglob("*"))):
            if p.is_file() and "__pycache__" not in p.parts and "tests" not in \
                    p.relative_to(ROOT).parts:
                files[f"/strata/{p.relative_to(ROOT)}"] = p.read_bytes()
    return files


class Forwarder:
    """TCP from ``listen`` (host, port) to ``target``: the guest reaches the plane's API, which
    listens on 127.0.0.1, at the host end of its network only. Threads; ``close()`` stops."""

    def __init__(self, listen: tuple, target: tuple):
        self.target = target
        self.server = socket.create_server(listen)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=30)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self):
        self.server.close()


class GuestNode:
    """One booted guest serving the node plugin at ``endpoint`` (ADDRESS:PORT)."""

    def __init__(self, image: Image, netns, workdir: Path, name: str = "guest-node",
                 iqn: str = "iqn.2026-12.io.strata.test:guest-node",
                 nqn: str = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-0000000c5100",
                 port: int = 10000, memory_mib: int = 1024, plane_url: str = "",
                 token: str = ""):
        self.image, self.netns, self.workdir = image, netns, Path(workdir)
        self.name, self.iqn, self.nqn, self.port = name, iqn, nqn, port
        self.address = netns.guest_ip(0)
        self.endpoint = f"{self.address}:{port}"
        self.memory_mib = memory_mib
        self.plane_url, self.token = plane_url, token  # given: it serves the controller too
        self.boot: Boot | None = None
        self.boot_seconds = 0.0

    def start(self, timeout: float = 600) -> "GuestNode":
        release = self.image.kernel.split("vmlinuz-", 1)[1]
        base = disk_image(release)
        overlay = self.workdir / "node.qcow2"
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                        str(base), str(overlay)], check=True)
        env = (f"NAME={self.name}\nADDRESS={self.address}\nPORT={self.port}\n"
               f"AGENT_PORT={self.port + 1}\nIQN={self.iqn}\nNQN={self.nqn}\n"
               f"GATEWAY={self.netns.host_ip}\n"
               f"MODE={'all' if self.plane_url else 'node'}\n")
        files = {}
        if self.plane_url:  # the controller too, reaching the plane through the forwarder
            env += ("PLANE='--plane-url " + self.plane_url
                    + " --token-file /opt/strata/token'\n")
            files["/strata/token"] = self.token.encode()
        files.update({"/guest.env": env.encode(), "/guest-init": GUEST_INIT.encode(),
                      "/strata/agent.py": AGENT.encode(), **_code_files()})
        initrd = self.image.initrd_with(SWITCH, files, tag="csi-node")
        tap = self.netns.add_tap()
        argv = self.image.boot_args(initrd, memory_mib=self.memory_mib) + [
            "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
            "-device", "virtio-net-pci,netdev=n0,romfile="]
        started = time.monotonic()
        self.boot = Boot(argv, self.workdir / "node-console.log", timeout=timeout,
                         netns=self.netns.name)
        try:
            self.boot.wait_for("STRATA-NODE-UP")
            self.wait_serving(timeout)
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - started
        return self

    def wait_serving(self, timeout: float) -> None:
        """Until the plugin answers Probe (AssertionError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.channel() as ch:
                    csi_pb2_grpc.IdentityStub(ch).Probe(csi_pb2.ProbeRequest(), timeout=5)
                return
            except grpc.RpcError:
                if self.boot.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the guest's node plugin did not answer:\n"
                                         + self.boot.output()[-3000:]) from None
                time.sleep(0.5)

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.endpoint)

    def node(self, channel):
        return csi_pb2_grpc.NodeStub(channel)

    def sh(self, script: str, stdin: bytes = b"", timeout: float = 300) -> bytes:
        """Run ``sh -c script`` in the guest (the test agent); its stdout. AssertionError
        with its stderr when it fails."""
        rc, out, err = self.run(["sh", "-c", script], stdin, timeout)
        if rc != 0:
            raise AssertionError(f"in the guest: {script}: exit {rc}: {err}")
        return out

    def run(self, argv: list[str], stdin: bytes = b"", timeout: float = 300):
        with socket.create_connection((self.address, self.port + 1), timeout=timeout + 30) as s:
            s.sendall(json.dumps({"argv": argv, "stdin": stdin.hex(),
                                  "timeout": timeout}).encode() + b"\n")
            reply = json.loads(s.makefile().readline())
        return reply["rc"], bytes.fromhex(reply["out"]), reply["err"]

    def console(self) -> str:
        return self.boot.output() if self.boot else ""

    def stop(self) -> None:
        if self.boot is not None:
            self.boot.kill()


Mode = csi_pb2.VolumeCapability.AccessMode.Mode
MiB = 1 << 20


def mount_cap(mode=Mode.SINGLE_NODE_WRITER, fs_type=""):
    return csi_pb2.VolumeCapability(
        mount=csi_pb2.VolumeCapability.MountVolume(fs_type=fs_type),
        access_mode=csi_pb2.VolumeCapability.AccessMode(mode=mode))


def block_cap():
    return csi_pb2.VolumeCapability(
        block=csi_pb2.VolumeCapability.BlockVolume(),
        access_mode=csi_pb2.VolumeCapability.AccessMode(mode=Mode.SINGLE_NODE_WRITER))


def rest(app, method, path, body=None):
    r = requests.request(method, f"{app.url}/api/v1/{path}", json=body, timeout=60,
                         headers={"Authorization": f"Token {app.credentials['token']}"})
    assert r.status_code < 400, (method, path, r.status_code, r.text)
    return r.json() if r.content else None


class Staged:
    """One volume through the CSI calls a kubelet makes, on the guest."""

    def __init__(self, ctl, node, node_id, name, cap, params, size=64 * MiB):
        self.ctl, self.node, self.node_id, self.cap = ctl, node, node_id, cap
        self.vol = ctl.CreateVolume(csi_pb2.CreateVolumeRequest(
            name=name, capacity_range=csi_pb2.CapacityRange(required_bytes=size),
            volume_capabilities=[cap], parameters=params), timeout=120).volume
        self.staging = f"/var/lib/kubelet/plugins/csi.strata.io/{name}/globalmount"
        self.target = f"/var/lib/kubelet/pods/{name}/volumes/csi/mount"
        self.context = {}

    def controller_publish(self):
        self.context = dict(self.ctl.ControllerPublishVolume(
            csi_pb2.ControllerPublishVolumeRequest(
                volume_id=self.vol.volume_id, node_id=self.node_id, volume_capability=self.cap,
                volume_context=self.vol.volume_context), timeout=120).publish_context)
        return self.context

    def stage(self, guest):
        guest.sh(f"mkdir -p {self.staging}")
        self.node.NodeStageVolume(csi_pb2.NodeStageVolumeRequest(
            volume_id=self.vol.volume_id, staging_target_path=self.staging,
            volume_capability=self.cap, volume_context=self.vol.volume_context,
            publish_context=self.context), timeout=300)

    def publish(self, readonly=False):
        self.node.NodePublishVolume(csi_pb2.NodePublishVolumeRequest(
            volume_id=self.vol.volume_id, staging_target_path=self.staging,
            target_path=self.target, volume_capability=self.cap, readonly=readonly,
            volume_context=self.vol.volume_context, publish_context=self.context),
            timeout=120)

    def unpublish_and_unstage(self):
        self.node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(
            volume_id=self.vol.volume_id, target_path=self.target), timeout=120)
        self.node.NodeUnstageVolume(csi_pb2.NodeUnstageVolumeRequest(
            volume_id=self.vol.volume_id, staging_target_path=self.staging), timeout=300)

    def delete(self):
        self.ctl.ControllerUnpublishVolume(csi_pb2.ControllerUnpublishVolumeRequest(
            volume_id=self.vol.volume_id, node_id=self.node_id), timeout=120)
        self.ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=self.vol.volume_id),
                              timeout=120)



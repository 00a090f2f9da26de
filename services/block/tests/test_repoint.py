"""An export re-pointed at another file (what a tier move of its volume does): the same
IQN/LUN, NBD name and socket serve the new file; a client connected before the swap reads
what it wrote and writes into the new file over the same connection; the old file is
released. A re-point the daemon refuses leaves the export serving the old file."""
import contextlib
import os
import shutil
import subprocess

import pytest

from services.block.tests.conftest import make_volume, need
from services.block.tests.qemuio import QemuIo
from services.block.transports.base import DaemonError, Host, HostGroup
from tests.kit import wait_for

MiB = 1 << 20
CLIENT = "iqn.2026-01.io.strata.test:client1"
SECRET = "s3cret-chap-01"


def image_opts(info, secret=SECRET):
    return (f"driver=iscsi,transport=tcp,portal={info['portal']},target={info['target_iqn']},"
            f"lun={info['lun']},initiator-name={CLIENT},user=client1,password={secret}")


def pattern_at(path, offset, size):
    with open(path, "rb") as f:
        f.seek(offset)
        return set(f.read(size))


@contextlib.contextmanager
def read_only_copy(workdir, src):
    """A copy of ``src`` seen through a read-only bind mount: no daemon can open it for
    writing (EROFS), so a re-point to it is refused. Unmounted even on failure."""
    if os.geteuid() != 0:
        pytest.skip("needs root (bind mount)")
    plain, ro = os.path.join(workdir, "plain"), os.path.join(workdir, "ro")
    os.makedirs(plain)
    os.makedirs(ro)
    shutil.copyfile(src, os.path.join(plain, "vol.raw"))
    subprocess.run(["mount", "--bind", plain, ro], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", ro], check=True)
        yield os.path.join(ro, "vol.raw")
    finally:
        subprocess.run(["umount", "-l", ro], check=False)


def open_fds(pid, path):
    d = f"/proc/{pid}/fd"
    return [fd for fd in os.listdir(d) if os.readlink(os.path.join(d, fd)).startswith(path)]


def test_iscsi_lun_follows_a_new_file(tgtd, workdir):
    need("qemu-io", "stdbuf")
    old = make_volume(workdir, "old.raw", 16 * MiB)
    group = HostGroup("hg1", hosts=[Host("client1", iqn=CLIENT, chap_user="client1",
                                         chap_secret=SECRET)])
    info = tgtd.export("vol1", old, host_group=group)
    with QemuIo(["--image-opts", image_opts(info)]) as io:
        io.check("write -P 0x41 0 1M")
        io.check("flush")
        with read_only_copy(workdir, old) as ro:          # tgtd cannot open it: refused
            with pytest.raises(DaemonError, match="still serves"):
                tgtd.repoint("vol1", ro)
        assert tgtd.volume_of("vol1") == old and tgtd.plan().empty()
        io.check("read -P 0x41 0 1M")
        new = os.path.join(workdir, "new.raw")
        shutil.copyfile(old, new)                         # what the move copied
        assert tgtd.repoint("vol1", new) == info          # same IQN, portal, LUN
        assert tgtd.volume_of("vol1") == new and tgtd.plan().empty()
        assert not open_fds(tgtd._proc.pid, old)          # tgtd let go of the old file
        os.unlink(old)                                    # the move deletes it
        # the session opened before the swap goes on, on the new file
        io.check("read -P 0x41 0 1M")
        io.check("write -P 0x42 1M 1M")
        io.check("flush")
    assert pattern_at(new, 0, MiB) == {0x41} and pattern_at(new, MiB, MiB) == {0x42}
    # a new session, with the same CHAP account and ACL, sees both
    with QemuIo(["--image-opts", image_opts(info)]) as io:
        io.check("read -P 0x41 0 1M")
        io.check("read -P 0x42 1M 1M")
    with pytest.raises(EOFError, match="Authentication failure"):
        QemuIo(["--image-opts", image_opts(info, secret="wrong-secret-99")])
    assert tgtd.repoint("vol1", new) == info              # again: nothing to do


def test_nbd_export_follows_a_new_file_and_a_refused_one_keeps_the_old(qsd, workdir):
    need("qemu-io", "stdbuf")
    old = make_volume(workdir, "old.raw", 16 * MiB)
    info = qsd.export("exp-1", old, protocol="nbd")
    with QemuIo(["-f", "raw", info["uri"]]) as io:
        io.check("write -P 0x41 0 1M")
        io.check("flush")
        with read_only_copy(workdir, old) as ro:          # cannot be opened for writing
            with pytest.raises(DaemonError, match="still serves"):
                qsd.repoint("exp-1", ro)
        assert qsd.volume_of("exp-1") == old
        io.check("read -P 0x41 0 1M")

        new = os.path.join(workdir, "new.raw")
        shutil.copyfile(old, new)
        assert qsd.repoint("exp-1", new) == info          # same name, host, port
        assert not open_fds(qsd._proc.pid, old)
        os.unlink(old)
        io.check("read -P 0x41 0 1M")                     # same connection, no error
        io.check("write -P 0x42 1M 1M")
        io.check("flush")
    assert pattern_at(new, 0, MiB) == {0x41} and pattern_at(new, MiB, MiB) == {0x42}
    with QemuIo(["-f", "raw", info["uri"]]) as io:
        io.check("read -P 0x42 1M 1M")
    # a second re-point and a daemon restart keep the generation's node names
    newer = os.path.join(workdir, "newer.raw")
    shutil.copyfile(new, newer)
    assert qsd.repoint("exp-1", newer) == info
    qsd.stop()
    qsd.start()
    with QemuIo(["-f", "raw", info["uri"]]) as io:
        io.check("read -P 0x42 1M 1M")
    qsd.unexport("exp-1")
    assert [n["node-name"] for n in qsd.qmp("query-named-block-nodes", {"flat": True})] == []


def test_vhost_user_blk_socket_stays(qsd, workdir):
    old = make_volume(workdir, "old.raw", 8 * MiB)
    info = qsd.export("exp-2", old, protocol="vhost-user-blk")
    new = os.path.join(workdir, "new.raw")
    shutil.copyfile(old, new)
    assert qsd.repoint("exp-2", new) == info
    assert os.path.exists(info["socket"])
    files = {n["node-name"]: n["file"] for n in qsd.qmp("query-named-block-nodes",
                                                        {"flat": True})
             if n["drv"] == "file"}
    assert list(files.values()) == [new], files
    assert [e["id"] for e in qsd.qmp("query-block-exports")] == ["exp-2"]


@pytest.mark.parametrize("protocol", ["iscsi", "nbd"])
def test_writes_running_through_repoints_see_no_error(protocol, request, workdir):
    """A client writing without pause while the export is re-pointed back and forth: every
    write completes without an error (iSCSI: held off and retried or re-sent after a new
    login; NBD: held while QEMU swaps the node); the last one is in the file served last."""
    import threading

    need("qemu-io", "stdbuf")
    daemon = request.getfixturevalue("tgtd" if protocol == "iscsi" else "qsd")
    files = [make_volume(workdir, f"{n}.raw", 16 * MiB) for n in "ab"]
    if protocol == "iscsi":
        info = daemon.export("vol1", files[0])
        args = ["--image-opts", (f"driver=iscsi,transport=tcp,portal={info['portal']},"
                                 f"target={info['target_iqn']},lun={info['lun']},"
                                 f"initiator-name={CLIENT}")]
        export_id = "vol1"
    else:
        info = daemon.export("exp-1", files[0], protocol="nbd")
        args, export_id = ["-f", "raw", info["uri"]], "exp-1"
    failures, count, stop = [], [0], threading.Event()
    with QemuIo(args) as io:
        def writer():
            while not stop.is_set():
                out = io.run("write -P 0x41 0 64k")
                count[0] += 1
                if "wrote 65536/65536" not in out or "fail" in out.lower():
                    failures.append(out)
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            wait_for(lambda: count[0] >= 3, interval=0.01)  # writing before the first swap
            for n in range(6):
                daemon.repoint(export_id, files[(n + 1) % 2])
            after = count[0]
            wait_for(lambda: count[0] >= after + 3, interval=0.01)  # and after the last one
        finally:
            stop.set()
            thread.join(120)
        assert not failures and count[0] > 0, failures[:3]
        io.check("write -P 0x5a 8M 64k")
        io.check("flush")
    assert daemon.volume_of(export_id) == files[0]
    assert pattern_at(files[0], 8 * MiB, 65536) == {0x5a}

"""Samba supervised by SmbServer, exercised with smbclient and smbprotocol (encrypted)."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from pathlib import Path

import pytest

from services.file.runtime import (
    CommandError,
    ConfigValidationError,
    InvalidShareSpec,
    SmbShare,
    delete_smb_user,
    ensure_unix_user,
    set_smb_password,
    unix_user_exists,
)

from .conftest import make_share_dir, make_snapshot, make_subvolume, run
from .smb_client import SmbProtocolClient, smbclient

pytest.importorskip("smbclient")
MiB = 1024 * 1024
pytestmark = pytest.mark.root   # SMB users are Unix accounts: useradd needs root


def sha_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_64_mib_through_smbclient_and_encrypted_smbprotocol(smb_factory, smb_users, scratch):
    fs = make_share_dir(scratch, "fs1")
    server = smb_factory([SmbShare("ckpt", fs, encrypt=True)])
    user, password = smb_users(server)
    data = os.urandom(64 * MiB)
    local = os.path.join(scratch, "shard.bin")
    with open(local, "wb") as f:
        f.write(data)
    done = smbclient(server, "ckpt", user, password,
                     f"put {local} cli.bin; get cli.bin {local}.back", encrypt=True)
    assert done.returncode == 0, done.stderr + done.stdout
    assert sha_file(local + ".back") == sha_file(os.path.join(fs, "cli.bin")) == sha_file(local)
    with SmbProtocolClient(server, user, password, encrypt=True) as client:
        client.write("ckpt", "py.bin", data)
        assert client.read_hash("ckpt", "py.bin") == (len(data), hashlib.sha256(data).hexdigest())


def test_read_only_share_and_valid_users(smb_factory, smb_users, scratch):
    fs = make_share_dir(scratch, "fs1")
    with open(os.path.join(fs, "kept"), "wb") as f:
        f.write(b"before")
    server = smb_factory([SmbShare("ro", fs, read_only=True)])
    alice, pw_a = smb_users(server)
    bob, pw_b = smb_users(server)
    server.apply([SmbShare("ro", fs, read_only=True),
                  SmbShare("alice-only", fs, valid_users=[alice])])
    local = os.path.join(scratch, "x")
    with open(local, "wb") as f:
        f.write(b"x" * 1000)
    done = smbclient(server, "ro", alice, pw_a, f"get kept {local}.kept; put {local} new")
    assert "NT_STATUS_ACCESS_DENIED" in done.stdout + done.stderr
    assert Path(local + ".kept").read_bytes() == b"before"
    assert not os.path.exists(os.path.join(fs, "new"))
    done = smbclient(server, "alice-only", bob, pw_b, "ls")
    assert done.returncode != 0 and "NT_STATUS_ACCESS_DENIED" in done.stdout + done.stderr
    assert smbclient(server, "alice-only", alice, pw_a, "ls").returncode == 0


def test_bad_config_is_refused_and_the_old_one_keeps_serving(smb_factory, smb_users, scratch):
    fs = make_share_dir(scratch, "fs1")
    server = smb_factory([SmbShare("a", fs)])
    user, password = smb_users(server)
    before = Path(server.conf_path).read_text()
    server.settings.server_encrypt = "sometimes"      # testparm: invalid value
    with pytest.raises(ConfigValidationError, match="testparm refused"):
        server.apply([SmbShare("a", fs), SmbShare("b", fs)])
    server.settings.server_encrypt = "desired"
    assert Path(server.conf_path).read_text() == before
    assert server.healthy()
    assert smbclient(server, "a", user, password, "ls").returncode == 0
    assert "NT_STATUS_BAD_NETWORK_NAME" in smbclient(server, "b", user, password, "ls").stdout
    # and a good change is picked up by the running smbd
    assert server.apply([SmbShare("a", fs), SmbShare("b", fs)]) is True
    assert smbclient(server, "b", user, password, "ls").returncode == 0
    assert server.apply([SmbShare("a", fs), SmbShare("b", fs)]) is False   # unchanged


def test_snapshots_visible_as_files_and_previous_versions(smb_factory, smb_users, btrfs_pool,
                                                          scratch):
    fs = make_subvolume(btrfs_pool, "smb-snap")
    with open(os.path.join(fs, "model.pt"), "wb") as f:
        f.write(b"version one")
    gmt = "@GMT-2026.11.30-05.00.00"   # matches the default snapshot_format
    make_snapshot(fs, gmt)
    make_snapshot(fs, "x")
    with open(os.path.join(fs, "model.pt"), "wb") as f:
        f.write(b"version two, longer")
    server = smb_factory([SmbShare("fs", fs)])
    user, password = smb_users(server)
    out = os.path.join(scratch, "out")
    # smbclient turns an @GMT path element into a timewarp request: Previous Versions
    done = smbclient(server, "fs", user, password,
                     f"get .snapshots/x/model.pt {out}.snap; get model.pt {out}.live; "
                     f"get {gmt}/model.pt {out}.prev; allinfo model.pt")
    assert done.returncode == 0, done.stderr + done.stdout
    assert Path(out + ".snap").read_bytes() == b"version one"
    assert Path(out + ".prev").read_bytes() == b"version one"
    assert Path(out + ".live").read_bytes() == b"version two, longer"
    assert gmt in done.stdout                      # listed by shadow_copy2 as a previous version
    with SmbProtocolClient(server, user, password) as client:
        assert client.read_hash("fs", ".snapshots\\x\\model.pt")[0] == len(b"version one")
        with pytest.raises(OSError):
            client.write("fs", ".snapshots\\x\\new", b"nope")
    assert not os.path.exists(os.path.join(fs, ".snapshots", "x", "new"))


def test_quota_is_the_share_size_and_a_write_past_it_fails(smb_factory, smb_users, btrfs_pool,
                                                           scratch):
    fs = make_subvolume(btrfs_pool, "smb-quota")
    run("btrfs", "qgroup", "limit", "24M", fs)
    server = smb_factory([SmbShare("q", fs, quota_bytes=24 * MiB)])
    user, password = smb_users(server)
    first, big = os.path.join(scratch, "first"), os.path.join(scratch, "big")
    with open(first, "wb") as f:
        f.write(os.urandom(8 * MiB))
    with open(big, "wb") as f:
        f.write(os.urandom(64 * MiB))
    done = smbclient(server, "q", user, password, f"put {first} first; du")
    assert done.returncode == 0, done.stderr + done.stdout
    total = re.search(r"(\d+) blocks of size (\d+)", done.stdout)
    assert int(total.group(1)) * int(total.group(2)) == 24 * MiB
    run("sync")
    done = smbclient(server, "q", user, password, f"put {big} big")
    assert "NT_STATUS_DISK_FULL" in done.stdout + done.stderr
    assert sha_file(os.path.join(fs, "first")) == sha_file(first)


def test_adding_and_removing_a_share_while_another_client_writes(smb_factory, smb_users, scratch):
    fs_a, fs_b = make_share_dir(scratch, "a"), make_share_dir(scratch, "b")
    server = smb_factory([SmbShare("a", fs_a, encrypt=True)])
    user, password = smb_users(server)
    written, errors, stop = [], [], threading.Event()

    def writer():
        try:
            with SmbProtocolClient(server, user, password, encrypt=True) as client:
                i = 0
                while not stop.is_set() or i < 3:
                    data = os.urandom(MiB)
                    client.write("a", f"part-{i}", data)
                    written.append((f"part-{i}", hashlib.sha256(data).hexdigest()))
                    i += 1
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(written) < 2 and thread.is_alive():
            time.sleep(0.05)
        assert server.apply([SmbShare("a", fs_a, encrypt=True), SmbShare("b", fs_b)]) is True
        assert smbclient(server, "b", user, password, "mkdir through-b").returncode == 0
        assert server.apply([SmbShare("a", fs_a, encrypt=True)]) is True
        assert "NT_STATUS_BAD_NETWORK_NAME" in smbclient(server, "b", user, password, "ls").stdout
        count = len(written)
        while len(written) < count + 2 and thread.is_alive():
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    assert errors == []
    assert os.path.isdir(os.path.join(fs_b, "through-b"))
    for name, digest in written:
        assert sha_file(os.path.join(fs_a, name)) == digest


def test_smb_user_password_change_and_deletion(smb_factory, smb_users, scratch):
    fs = make_share_dir(scratch, "fs1")
    server = smb_factory([SmbShare("a", fs)])
    user, password = smb_users(server)
    assert smbclient(server, "a", user, password, "ls").returncode == 0
    set_smb_password(server.conf_path, user, "Another-pw-2")
    assert "NT_STATUS_LOGON_FAILURE" in smbclient(server, "a", user, password, "ls").stdout
    assert smbclient(server, "a", user, "Another-pw-2", "ls").returncode == 0
    delete_smb_user(server.conf_path, user)
    assert not unix_user_exists(user)
    assert "NT_STATUS_LOGON_FAILURE" in smbclient(server, "a", user, "Another-pw-2", "ls").stdout
    with pytest.raises(CommandError, match="ensure_unix_user first"):
        set_smb_password(server.conf_path, user, "x")
    with pytest.raises(InvalidShareSpec):
        ensure_unix_user("Bad Name")

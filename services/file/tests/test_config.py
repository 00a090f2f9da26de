"""Config builders, renderers, atomic writes and path checks: no daemon needed."""

from __future__ import annotations

import os
import stat

import pytest

from plumbing.atomic import write_if_changed
from services.file.runtime import (
    DEFAULT_SNAPSHOT_FORMAT,
    FilesystemMissing,
    InvalidShareSpec,
    NfsClientRule,
    NfsExport,
    NfsSettings,
    PathOutsideFilesystem,
    SmbSettings,
    SmbShare,
    build_ganesha_config,
    build_smb_config,
    dfree_scripts,
    render_ganesha_conf,
    render_smb_conf,
    resolve_share_path,
)


def nfs_settings(**kw):
    return NfsSettings(state_dir="/var/lib/strata/nfs", port=12049, bind_address="127.0.0.1", **kw)


def test_ganesha_core_is_nfsv4_only_without_rpcbind_and_tuned_for_parallel_writers():
    config = build_ganesha_config(nfs_settings(worker_threads=512), [])
    core = config["NFS_CORE_PARAM"]
    assert core["Protocols"] == [4] and core["NFS_Port"] == 12049
    assert core["Bind_addr"] == "127.0.0.1"
    assert core["Enable_NLM"] is False and core["Enable_RQUOTA"] is False
    assert core["Enable_UDP"] is False
    assert core["RPC_Ioq_ThrdMax"] == 512
    assert core["MaxRPCRecvBufferSize"] > 4 * 1024 * 1024
    assert config["NFSV4"]["RecoveryRoot"] == "/var/lib/strata/nfs/recovery"
    assert config["NFSV4"]["Only_Numeric_Owners"] is True
    assert config["EXPORT"] == []


def test_ganesha_export_has_one_client_block_per_rule():
    export = NfsExport(7, "/pool/fs1", "/fs1", [
        {"address": "10.0.0.0/24", "access": "rw", "squash": "no_root_squash"},
        NfsClientRule("192.0.2.9", "ro", "all_squash", anonymous_uid=1000, anonymous_gid=100),
    ])
    block = build_ganesha_config(nfs_settings(), [export])["EXPORT"][0]
    assert block["Protocols"] == [4] and block["Transports"] == ["TCP"]
    assert block["Export_Id"] == 7 and block["Path"] == "/pool/fs1" and block["Pseudo"] == "/fs1"
    assert block["Access_Type"] == "None"          # nobody but the listed clients
    assert block["SecType"] == ["sys"] and block["FSAL"] == {"Name": "VFS"}
    assert block["MaxWrite"] == block["MaxRead"] == 4 * 1024 * 1024
    assert block["CLIENT"] == [
        {"Clients": ["10.0.0.0/24"], "Protocols": [4], "Access_Type": "RW",
         "Squash": "No_Root_Squash",
         "Anonymous_Uid": 65534, "Anonymous_Gid": 65534},
        {"Clients": ["192.0.2.9"], "Protocols": [4], "Access_Type": "RO",
         "Squash": "All_Squash",
         "Anonymous_Uid": 1000, "Anonymous_Gid": 100},
    ]


def test_ganesha_exports_snapshots_read_only_beside_each_export():
    export = NfsExport(3, "/pool/fs1", "/fs1", [NfsClientRule("10.0.0.0/24", "rw")])
    plain, snaps = build_ganesha_config(nfs_settings(), [export])["EXPORT"]
    assert plain["Export_Id"] == 3
    assert snaps["Export_Id"] == 3 + 32768
    assert snaps["Path"] == "/pool/fs1/.snapshots" and snaps["Pseudo"] == "/fs1/.snapshots"
    assert [c["Access_Type"] for c in snaps["CLIENT"]] == ["RO"]
    no_snaps = NfsExport(3, "/pool/fs1", "/fs1", snapshots=False)
    assert len(build_ganesha_config(nfs_settings(), [no_snaps])["EXPORT"]) == 1


def test_ganesha_render_prints_blocks_and_quotes_only_what_needs_it():
    export = NfsExport(1, "/pool/my fs", "/fs", [NfsClientRule("127.0.0.1")])
    text = render_ganesha_conf(build_ganesha_config(nfs_settings(), [export]))
    assert "NFS_CORE_PARAM {" in text and "Protocols = 4;" in text
    assert 'Path = "/pool/my fs";' in text and "Pseudo = /fs;" in text
    assert "    CLIENT {" in text and "Clients = 127.0.0.1;" in text
    assert "Enable_NLM = false;" in text
    assert text.count("{") == text.count("}")


@pytest.mark.parametrize("bad", [
    lambda: NfsExport(1, "/p", "/x", [NfsClientRule("10.0.0.300")]),
    lambda: NfsExport(1, "/p", "/x", [NfsClientRule("10.0.0.1", access="rwx")]),
    lambda: NfsExport(1, "/p", "/x", [NfsClientRule("10.0.0.1", squash="maybe")]),
    lambda: NfsExport(0, "/p", "/x"),
    lambda: NfsExport(32768, "/p", "/x"),     # reserved for snapshot exports
    lambda: NfsExport(1, "relative", "/x"),
    lambda: NfsExport(1, "/p", "/x/../y"),
    lambda: NfsExport(1, '/p";x', "/x"),
    lambda: build_ganesha_config(nfs_settings(), [NfsExport(1, "/a", "/a"),
                                                  NfsExport(1, "/b", "/b")]),
    lambda: build_ganesha_config(nfs_settings(), [NfsExport(1, "/a", "/a"),
                                                  NfsExport(2, "/b", "/a")]),
])
def test_ganesha_refuses_malformed_exports(bad):
    with pytest.raises(InvalidShareSpec):
        bad()


def smb_settings(**kw):
    return SmbSettings(state_dir="/var/lib/strata/smb", port=1445, interfaces=["lo"], **kw)


def test_smb_global_is_a_standalone_server_with_state_under_the_state_dir():
    glob = build_smb_config(smb_settings(), [])["global"]
    assert glob["server role"] == "standalone server"
    assert glob["smb ports"] == 1445 and glob["interfaces"] == ["lo"]
    assert glob["bind interfaces only"] is True and glob["disable netbios"] is True
    for key in ("private dir", "lock directory", "state directory", "cache directory",
                "pid directory", "ncalrpc dir", "binddns dir"):
        assert glob[key].startswith("/var/lib/strata/smb/")
    assert glob["passdb backend"] == "tdbsam:/var/lib/strata/smb/private/passdb.tdb"
    assert glob["map to guest"] == "never" and glob["server signing"] == "default"


def test_smb_share_options():
    share = SmbShare("ckpt", "/pool/fs1", read_only=True, valid_users=["alice", "bob"],
                     encrypt=True, signing=True, quota_bytes=10 << 30)
    config = build_smb_config(smb_settings(snapshot_format="sched-%Y%m%d-%H%M"), [share])
    section = config["shares"]["ckpt"]
    assert section["path"] == "/pool/fs1" and section["read only"] is True
    assert section["valid users"] == ["alice", "bob"]
    assert section["smb encrypt"] == "required"
    assert config["global"]["server signing"] == "mandatory"   # Samba: server-wide only
    assert section["vfs objects"] == ["shadow_copy2"]
    assert section["shadow:snapdir"] == ".snapshots"
    assert section["shadow:format"] == "sched-%Y%m%d-%H%M"
    assert section["dfree command"] == "/var/lib/strata/smb/dfree/ckpt"
    script = dfree_scripts(smb_settings(), [share])["/var/lib/strata/smb/dfree/ckpt"]
    assert f"total={10 << 20}" in script


def test_smb_defaults_use_gmt_snapshot_names_and_no_extras():
    section = build_smb_config(smb_settings(), [SmbShare("a", "/p")])["shares"]["a"]
    assert section["shadow:format"] == DEFAULT_SNAPSHOT_FORMAT == "@GMT-%Y.%m.%d-%H.%M.%S"
    assert section["shadow:localtime"] is False
    assert "smb encrypt" not in section and "dfree command" not in section
    assert "valid users" not in section


def test_smb_render_prints_sections():
    text = render_smb_conf(build_smb_config(smb_settings(), [
        SmbShare("a", "/p/a", valid_users=["alice"], read_only=False)]))
    assert text.splitlines()[1] == "[global]"
    assert "\n[a]\n" in text and "    read only = no" in text
    assert "    valid users = alice" in text and "    interfaces = lo" in text


@pytest.mark.parametrize("bad", [
    lambda: SmbShare("global", "/p"),
    lambda: SmbShare("a b", "/p"),
    lambda: SmbShare("a", "relative"),
    lambda: SmbShare("a", "/p", valid_users=["Bad User"]),
    lambda: SmbShare("a", "/p", quota_bytes=0),
    lambda: SmbShare("a", "/p\n[evil]"),
    lambda: build_smb_config(smb_settings(), [SmbShare("a", "/p"), SmbShare("A", "/q")]),
])
def test_smb_refuses_malformed_shares(bad):
    with pytest.raises(InvalidShareSpec):
        bad()


def test_write_if_changed_is_atomic_and_reports_changes(tmp_path):
    target = tmp_path / "conf"
    assert write_if_changed(target, "a\n", 0o600) is True
    assert write_if_changed(target, "a\n", 0o600) is False
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert write_if_changed(target, "a\n", 0o644) is True      # mode alone changed
    assert write_if_changed(target, "b\n", 0o644) is True
    assert target.read_text() == "b\n"
    assert os.listdir(tmp_path) == ["conf"]                    # no temporary files left


def test_paths_inside_the_file_system_are_accepted(tmp_path):
    root = tmp_path / "fs"
    (root / "a" / "b").mkdir(parents=True)
    assert resolve_share_path(root) == str(root.resolve())
    assert resolve_share_path(root, "a/b") == str((root / "a" / "b").resolve())
    assert resolve_share_path(root, root / "a" / ".." / "a") == str((root / "a").resolve())


def test_paths_outside_the_file_system_are_refused(tmp_path):
    root = tmp_path / "fs"
    root.mkdir()
    (tmp_path / "other").mkdir()
    (root / "escape").symlink_to(tmp_path / "other")
    (tmp_path / "fs2").mkdir()
    for path in ("../other", "escape", str(tmp_path / "other"), "/etc", "../fs2"):
        with pytest.raises(PathOutsideFilesystem, match="outside the file system"):
            resolve_share_path(root, path)
    with pytest.raises(FilesystemMissing, match="deleted"):
        resolve_share_path(tmp_path / "gone", "a")
    with pytest.raises(FilesystemMissing):
        resolve_share_path(root, "missing")

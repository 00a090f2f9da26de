"""The 2-minute soak (bench/soak.py) inside the suite: a whole appliance under mixed load with
a kill -9 of each daemon and a full pool on a timer loses nothing acknowledged, refuses only
as the faults explain, and no daemon leaks. Local pools only (no Ceph cluster)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.kit import ROOT

pytestmark = pytest.mark.root
KILLED = ("tgtd", "qemu-storage-daemon", "ganesha", "smbd", "s3", "redis", "web", "worker")


def test_two_minute_soak_loses_nothing_and_leaks_nothing(tmp_path):
    pytest.importorskip("nfs_rs")
    pytest.importorskip("smbclient")
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, "bench/soak.py", "--minutes", "2", "--json",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert report["ok"] and not report["failures"], report["failures"]
    assert report["unexpected_errors"] == {}, report["unexpected_errors"]
    assert report["read_back"]["ok"] and report["read_back"]["checked_at_end"] > 0
    classes = report["classes"]
    for cls in ("s3_put", "s3_get", "s3_multipart", "s3_list", "nfs_write", "sample_read",
                "smb_write", "nbd_write", "iscsi_write", "ckpt_save", "ckpt_restore",
                "vector_upsert", "vector_search", "snapshot", "backup", "tier_move"):
        assert classes.get(cls, {}).get("ops", 0) > 0, (cls, classes.get(cls))
        assert classes[cls]["unexpected_errors"] == 0, (cls, classes[cls])
    happened = {f["kind"] for f in report["faults"] if f["happened"]}
    assert {f"kill:{n}" for n in KILLED} | {"full_pool"} <= happened, report["faults"]
    assert all(not f["read_back"]["mismatches"] for f in report["faults"]), report["faults"]
    # the memory figures are real measurements, and the leak rule judged every daemon
    memory = report["memory"]
    assert set(KILLED) <= set(memory), sorted(memory)
    assert all(m["end"] and m["end"]["pss_mib"] > 0 and m["end"]["fds"] > 0
               for m in memory.values()), memory
    assert not [n for n, m in memory.items() if m["leak"]], memory

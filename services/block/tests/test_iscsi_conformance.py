"""SCSI conformance: every iscsi-test-cu test that tgtd passes on a plain file set up by hand
must pass on a Strata LUN too (CHAP, ACL and all). tgtd's own failures are not ours."""

import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from services.block.tests.conftest import make_volume, need
from plumbing.process import wait_for_port
from services.block.transports.base import Host, HostGroup
from tests.kit import free_port

MiB = 1 << 20
INIT1 = "iqn.2026-01.io.strata.test:cu1"
INIT2 = "iqn.2026-01.io.strata.test:cu2"
SECRET = "cu-chap-secret1"
# suites that sit in timeouts (6-10 s each here): iSCSI sequence numbers, and RESERVE(6)
# (tgtd's SPC-2 reservations; persistent reservations, Prout*/Prin*, still run)
SLOW = {"ALL.iSCSIcmdsn", "ALL.iSCSIdatasn", "ALL.Reserve6"}


def families():
    out = subprocess.run(["iscsi-test-cu", "-l"], capture_output=True, text=True).stdout
    return [f for f in re.findall(r"^(ALL\.[A-Za-z0-9]+)$", out, re.M) if f not in SLOW]


def run_cu(url, workdir):
    """{test name: passed?} for every family, from iscsi-test-cu's CUnit XML."""
    results = {}
    for fam in families():
        d = tempfile.mkdtemp(dir=workdir)
        subprocess.run(["iscsi-test-cu", "-d", "-x", "-i", INIT1, "-I", INIT2, "-t", fam, url],
                       cwd=d, capture_output=True, timeout=60)
        xml_path = os.path.join(d, "CUnitAutomated-Results.xml")
        if not os.path.exists(xml_path):
            continue
        xml = open(xml_path, errors="replace").read()
        for suite, body in re.findall(r"<SUITE_NAME> (\S+) </SUITE_NAME>(.*?)</CUNIT_RUN_SUITE>",
                                      xml, re.S):
            for kind, name in re.findall(
                    r"<CUNIT_RUN_TEST_(SUCCESS|FAILURE)>\s*<TEST_NAME> (\S+) </TEST_NAME>", body):
                key = f"{suite}.{name}"
                results[key] = results.get(key, True) and kind == "SUCCESS"
    return results


def plain_tgtd(workdir, vol):
    """tgtd on a plain file, configured by hand the Debian way (the peer)."""
    port, cport = free_port(), 32100 + os.getpid() % 500
    proc = subprocess.Popen(["tgtd", "-f", "-C", str(cport), "--iscsi",
                             f"portal=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    adm = ["tgtadm", "-C", str(cport), "--lld", "iscsi"]
    for _ in range(100):
        if subprocess.run(adm + ["--op", "show", "--mode", "sys"],
                          capture_output=True).returncode == 0:
            break
        time.sleep(0.05)
    iqn = "iqn.2026-01.io.strata.test:plain"
    for args in (["--op", "new", "--mode", "target", "--tid", "1", "-T", iqn],
                 ["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", vol,
                  "--bstype", "rdwr"],
                 ["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"]):
        subprocess.run(adm + args, check=True, capture_output=True)
    assert wait_for_port("127.0.0.1", port)

    def stop():
        subprocess.run(adm + ["--op", "delete", "--mode", "target", "--tid", "1", "--force"],
                       capture_output=True)
        subprocess.run(adm + ["--op", "delete", "--mode", "system"], capture_output=True)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return f"iscsi://127.0.0.1:{port}/{iqn}/1", stop


def test_strata_lun_passes_what_plain_tgtd_passes(tgtd, workdir):
    need("iscsi-test-cu")
    group = HostGroup("cu", hosts=[
        Host("cu1", iqn=INIT1, chap_user="cu", chap_secret=SECRET),
        Host("cu2", iqn=INIT2, chap_user="cu", chap_secret=SECRET)])
    info = tgtd.export("cu-lun", make_volume(workdir, "strata.raw", 64 * MiB), host_group=group)
    our_url = f"iscsi://cu%{SECRET}@{info['portal']}/{info['target_iqn']}/{info['lun']}"
    peer_url, stop_peer = plain_tgtd(workdir, make_volume(workdir, "plain.raw", 64 * MiB))
    try:
        with ThreadPoolExecutor(2) as pool:       # both targets at once: half the wall time
            peer_run = pool.submit(run_cu, peer_url, workdir)
            ours = run_cu(our_url, workdir)
            peer = peer_run.result()
    finally:
        stop_peer()
    passed_by_peer = {t for t, ok in peer.items() if ok}
    assert len(passed_by_peer) > 150, "iscsi-test-cu did not run against the plain tgtd"
    missing = sorted(t for t in passed_by_peer if not ours.get(t))
    assert not missing, f"pass on plain tgtd but not on the Strata LUN: {missing}"

"""csi-sanity v5.3.1 (kubernetes-csi/csi-test, built from the pinned source by
scripts/build-csi-sanity.sh) against the plugin serving Identity, Controller and Node, the
controller talking to a live appliance (`strata up`) over its REST API.

The node side here is what this host can do: the ``local`` protocol (a hyperconverged node: the
appliance's own file system bind-mounted into staging and target paths). The host has no NFS,
iSCSI or NVMe kernel clients: staging over those is tested in a TCG guest
(test_vm_node.py).
Every spec csi-sanity skips is listed in SKIPPED with the reason; the run must skip exactly
those and fail none."""
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from services.csi import mounts
from services.csi.tests.plugin import ROOT, Plugin, local_node

pytestmark = pytest.mark.root

MiB = 1 << 20

_C = "[It] Controller Service [Controller Server] "
_G = "[It] GroupController Service [GroupController "
_M = "[It] ModifyVolume [Controller Server] "
_SKIPS = {
    "the driver offers no GroupController service (volume group snapshots)": [
        _G + "Server] GroupControllerGetCapabilities should return appropriate capabilities",
        _G + "VolumeGroupSnapshots] CreateVolumeGroupSnapshot should fail when no name is provided",
        _G + "VolumeGroupSnapshots] GetVolumeGroupSnapshot should fail when no volume id is provided",
        _G + "VolumeGroupSnapshots] GetVolumeGroupSnapshot should fail when an invalid volume id is used",
        _G + "VolumeGroupSnapshots] DeleteVolumeGroupSnapshot should fail when no volume id is provided",
        _G + "VolumeGroupSnapshots] DeleteVolumeGroupSnapshot should succeed when an invalid volume id is used",
    ],
    "ControllerModifyVolume (VolumeAttributesClass) is not offered: no MODIFY_VOLUME": [
        _M + "should fail if no volume id is given",
        _M + "should fail if volume does not exist",
        _M + "should fail if specified mutable parameters are not supported by the volume",
        _M + "should modify a volume created without a volume attribute class",
        _M + "should modify a volume created with a volume attribute class",
        _M + "should fail to modify a volume created with a volume attribute class if new mutable parameters are not supported by volume",
        _C + "CreateVolume should create volume with a volume attribute class",
        _C + "CreateVolume should not create volume with an invalid volume attribute class",
    ],
    "csi-sanity v5.3.1 marks this spec pending (XIt) itself": [
        _C + "ListVolumes pagination should detect volumes added between pages and accept tokens when the last volume from a page is deleted",
    ],
    "NodeGetInfo reports no attach limit (max_volumes_per_node 0): a node takes any "
    "number of Strata volumes": [
        _C + "ControllerPublishVolume should fail when publishing more volumes than the node max attach limit",
    ],
    "PUBLISH_READONLY is not claimed: a block volume is published read-write only (in Strata "
    "the export is read-only, not one host's access to it)": [
        _C + "ControllerPublishVolume should fail when the volume is already published but is incompatible",
    ],
}
# every spec csi-sanity skips -> why it does not apply to what the driver claims
SKIPPED: dict[str, str] = {name: why for why, names in _SKIPS.items() for name in names}


def build_csi_sanity() -> str:
    """The csi-sanity binary (built once per machine)."""
    built = subprocess.run([str(ROOT / "scripts" / "build-csi-sanity.sh")], cwd=ROOT,
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def csi_sanity() -> str:
    return build_csi_sanity()


def _cases(report: Path) -> list[tuple[str, str, str]]:
    """(name, outcome, message) of every spec in a ginkgo JUnit report."""
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name")
        if case.find("failure") is not None or case.find("error") is not None:
            node = case.find("failure") if case.find("failure") is not None else case.find("error")
            out.append((name, "failed", (node.get("message") or "") + (node.text or "")))
        elif case.find("skipped") is not None:
            out.append((name, "skipped", case.find("skipped").get("message") or ""))
        else:
            out.append((name, "passed", ""))
    return out


def run_sanity(csi_sanity: str, work: Path, token: str, endpoint: str, parameters: str,
               extra: tuple = ()) -> tuple[list, list, list, subprocess.CompletedProcess]:
    """csi-sanity against ``endpoint`` (``extra``: more flags, e.g. a controller endpoint of
    its own and path commands); (passed, skipped, failed, the run)."""
    params = work / "params.yaml"
    params.write_text(parameters)
    secrets = work / "secrets.yaml"
    secret_keys = ["CreateVolumeSecret", "DeleteVolumeSecret", "ControllerPublishVolumeSecret",
                   "ControllerUnpublishVolumeSecret", "ControllerValidateVolumeCapabilitiesSecret",
                   "NodeStageVolumeSecret", "NodePublishVolumeSecret",
                   "CreateSnapshotSecret", "DeleteSnapshotSecret", "ControllerExpandVolumeSecret",
                   "ListSnapshotsSecret"]
    secrets.write_text("".join(f"{k}:\n  token: {token}\n" for k in secret_keys))
    report = work / "junit.xml"
    run = subprocess.run(
        [csi_sanity, f"--csi.endpoint={endpoint}",
         f"--csi.mountdir={work / 'target'}", f"--csi.stagingdir={work / 'staging'}",
         f"--csi.testvolumeparameters={params}", f"--csi.secrets={secrets}",
         f"--csi.testvolumesize={64 * MiB}", f"--csi.testvolumeexpandsize={128 * MiB}",
         f"--ginkgo.junit-report={report}", "--ginkgo.no-color", "--ginkgo.timeout=30m",
         *extra],
        cwd=work, capture_output=True, text=True, timeout=2400)
    (work / "csi-sanity.log").write_text(run.stdout + run.stderr)
    cases = _cases(report)
    failed = [(n, m[:2000]) for n, o, m in cases if o == "failed"]
    skipped = sorted(n for n, o, _ in cases if o == "skipped")
    passed = [n for n, o, _ in cases if o == "passed"]
    print(f"csi-sanity: {len(passed)} passed, {len(skipped)} skipped, {len(failed)} failed; "
          f"log in {work}")
    return passed, skipped, failed, run


def test_csi_sanity_passes_against_a_live_appliance(appliance, csi_sanity):
    creds = appliance.credentials
    work = Path(tempfile.mkdtemp(prefix="strata-test-csi-sanity-"))
    # the node plugin is the appliance's node: csi-sanity asks for volumes in its topology
    plugin = Plugin(work, creds["api_url"], creds["token"],
                    node_id=local_node(creds["api_url"], creds["token"])).start()
    try:
        passed, skipped, failed, run = run_sanity(csi_sanity, work, creds["token"],
                                                  plugin.endpoint,
                                                  "protocol: local\npool: default\n")
    finally:
        plugin.stop()
        leftovers = sorted((p for p in mounts.mount_points() if p.startswith(str(work))),
                           reverse=True)
        for path in leftovers:
            mounts.unmount(path)
    assert not leftovers, f"the plugin left mounts behind: {leftovers}"
    assert not failed, "\n\n".join(f"{n}\n{m}" for n, m in failed)
    assert run.returncode == 0, run.stdout[-4000:]
    assert skipped == sorted(SKIPPED), (
        "skipped specs changed; unexpected: " + repr(sorted(set(skipped) - set(SKIPPED)))
        + "; no longer skipped: " + repr(sorted(set(SKIPPED) - set(skipped))))
    assert len(passed) > 60

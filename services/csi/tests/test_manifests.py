"""deploy/kubernetes/ against the Kubernetes API schemas (kubernetes-validate, strict: an
unknown field fails too). No cluster runs here, so this is all a Kubernetes install of the
driver is checked by. The snapshot objects are CRDs of the external-snapshotter, whose
schemas kubernetes-validate does not carry: their required fields are checked by hand."""
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from services.csi.identity import NAME
from services.csi.volumes import PROTOCOLS, StorageClass

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"
K8S_VERSION = "1.34"  # a release current with the sidecars the manifests name
SNAPSHOT_KINDS = ("VolumeSnapshotClass", "VolumeSnapshot")


def documents() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path in sorted(DEPLOY.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize("where,doc", documents(),
                         ids=lambda x: x if isinstance(x, str) else x.get("kind"))
def test_every_manifest_is_valid(where, doc):
    if doc["kind"] in SNAPSHOT_KINDS:
        assert doc["apiVersion"] == "snapshot.storage.k8s.io/v1"
        if doc["kind"] == "VolumeSnapshotClass":
            assert doc["driver"] == NAME and doc["deletionPolicy"] in ("Delete", "Retain")
        else:
            assert len(doc["spec"]["source"]) == 1
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_refuses_a_wrong_manifest():
    csidriver = yaml.safe_load((DEPLOY / "csidriver.yaml").read_text())
    csidriver["spec"]["attachRequird"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(csidriver, K8S_VERSION, strict=True)


def test_the_manifests_fit_the_driver():
    docs = documents()
    kinds = {doc["kind"] for _, doc in docs}
    assert {"CSIDriver", "Deployment", "DaemonSet", "StorageClass", "PersistentVolumeClaim",
            "VolumeSnapshotClass", "VolumeSnapshot"} <= kinds
    assert [d for _, d in docs if d["kind"] == "CSIDriver"][0]["metadata"]["name"] == NAME
    classes = [d for _, d in docs if d["kind"] == "StorageClass"]
    assert all(c["provisioner"] == NAME for c in classes)
    assert sorted(c["parameters"]["protocol"] for c in classes) == sorted(PROTOCOLS)
    for _, doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                tag = container["image"].rpartition(":")[2]
                assert tag.startswith(("v", "0")) and tag != "latest", container["image"]
    node = [d for _, d in docs if d["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]
    plugin = [c for c in node["containers"] if c["name"] == "strata-csi"][0]
    # topology: the provisioner passes it on, the node plugin is named after its node
    assert "--node-id=$(NODE_NAME)" in plugin["args"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in plugin["env"]
    controller = [d for _, d in docs if d["kind"] == "Deployment"][0]["spec"]["template"]
    provisioner = [c for c in controller["spec"]["containers"]
                   if c["name"] == "csi-provisioner"][0]
    assert "--feature-gates=Topology=true" in provisioner["args"]
    nvmeof = [c for c in classes if c["parameters"]["protocol"] == "nvmeof"][0]["parameters"]
    assert StorageClass.from_parameters(nvmeof, block_access=True).qos
    assert plugin["securityContext"]["privileged"]
    assert {"mountPath": "/var/lib/kubelet", "mountPropagation": "Bidirectional",
            "name": "kubelet-dir"} in plugin["volumeMounts"]

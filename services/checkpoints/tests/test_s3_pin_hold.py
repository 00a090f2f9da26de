"""A pin of a checkpoint version kept in a bucket with Object Lock is an S3 legal hold on its
objects: no S3 client can delete them while the pin holds; unpinning lifts the holds."""
import pytest
from botocore.exceptions import ClientError

from services.checkpoints.sources import make_client
from services.checkpoints.tests.conftest import ACCESS, SECRET

pytest.importorskip("boto3", reason="S3 tests need boto3")
pytestmark = [pytest.mark.django_db]


def test_pin_holds_the_versions_objects_in_a_locked_bucket_only(api, gateway, settings):
    settings.STRATA_CHECKPOINT_S3 = gateway
    s3 = make_client(gateway["endpoint"], ACCESS, SECRET)
    s3.create_bucket(Bucket="vault", ObjectLockEnabledForBucket=True)
    assert api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "vault"}, format="json").status_code == 201
    v = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 7}, format="json").json()
    shards = {"rank0.distcp": b"r0" * 1000, ".metadata": b"meta"}
    vids = {}
    for name, data in shards.items():
        vids[name] = s3.put_object(Bucket="vault", Key=f"llm/step-7/{name}", Body=data)["VersionId"]
    url = f"/api/v1/checkpoint-jobs/llm/versions/{v['id']}/"
    r = api.post(url + "commit/", {"manifest": [{"name": n, "size": len(d)} for n, d in shards.items()]},
                 format="json")
    assert r.status_code == 200, r.json()
    assert api.post(url + "pin/", {"reason": "release candidate"}, format="json").status_code == 200
    for name, vid in vids.items():
        key = f"llm/step-7/{name}"
        assert s3.get_object_legal_hold(Bucket="vault", Key=key, VersionId=vid)["LegalHold"]["Status"] == "ON"
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket="vault", Key=key, VersionId=vid, BypassGovernanceRetention=True)
        assert e.value.response["Error"]["Code"] == "AccessDenied"
    assert api.post(url + "unpin/", format="json").status_code == 200
    for name, vid in vids.items():
        s3.delete_object(Bucket="vault", Key=f"llm/step-7/{name}", VersionId=vid)
    # in a bucket without Object Lock a pin is the catalog's only
    s3.create_bucket(Bucket="plain")
    api.post("/api/v1/checkpoint-jobs/", {"name": "job", "bucket": "plain"}, format="json")
    v = api.post("/api/v1/checkpoint-jobs/job/versions/", {"step": 1}, format="json").json()
    s3.put_object(Bucket="plain", Key="job/step-1/a", Body=b"a")
    url = f"/api/v1/checkpoint-jobs/job/versions/{v['id']}/"
    assert api.post(url + "commit/", {"manifest": [{"name": "a", "size": 1}]}, format="json").status_code == 200
    assert api.post(url + "pin/", {"reason": "keep"}, format="json").status_code == 200
    s3.delete_object(Bucket="plain", Key="job/step-1/a")   # nothing at S3 level holds it

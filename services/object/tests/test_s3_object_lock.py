"""Object Lock (WORM) through boto3: lock-enabled buckets, default retention, GOVERNANCE and
COMPLIANCE retention, the bypass header, legal holds; every refused delete answers S3's 403
AccessDenied and leaves the version readable, including lifecycle's noncurrent expiration."""
from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.tests.gatewayproc import ADMIN_TOKEN, GatewayProcess


@pytest.fixture(scope="module")
def lock_gateway():
    with GatewayProcess.running(lifecycle_interval=0, lifecycle_day_seconds=1) as gw:
        yield gw


@pytest.fixture
def s3(lock_gateway):
    return lock_gateway.client()


@pytest.fixture
def locked_bucket(s3):
    name = f"worm-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def error_of(exc_info) -> tuple[int, str]:
    resp = exc_info.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def later(seconds: float) -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=seconds)


def test_lock_enabled_bucket_configuration(s3, locked_bucket):
    assert s3.get_bucket_versioning(Bucket=locked_bucket)["Status"] == "Enabled"
    assert s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled"}
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=locked_bucket, VersioningConfiguration={"Status": "Suspended"})
    assert error_of(e) == (409, "InvalidBucketState")
    s3.put_object_lock_configuration(Bucket=locked_bucket, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 2}}})
    cfg = s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"]
    assert cfg["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 2}
    put = s3.put_object(Bucket=locked_bucket, Key="default", Body=b"d")
    head = s3.head_object(Bucket=locked_bucket, Key="default")
    assert head["ObjectLockMode"] == "GOVERNANCE"
    until = head["ObjectLockRetainUntilDate"]
    assert dt.timedelta(days=2) - dt.timedelta(minutes=5) < until - dt.datetime.now(dt.timezone.utc) <= dt.timedelta(days=2)
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=locked_bucket, Key="default", VersionId=put["VersionId"])
    assert error_of(e) == (403, "AccessDenied")
    # a period of 0 or less: 400 InvalidRetentionPeriod (as S3 answers, and s3-tests'
    # test_object_lock_put_obj_lock_invalid_days / _years1 ask); other bad rules: MalformedXML
    for period, code in (({"Days": 0}, "InvalidRetentionPeriod"), ({"Years": -1}, "InvalidRetentionPeriod"),
                         ({"Days": 1, "Years": 1}, "MalformedXML")):
        bad = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", **period}}}
        with pytest.raises(ClientError) as e:
            s3.put_object_lock_configuration(Bucket=locked_bucket, ObjectLockConfiguration=bad)
        assert error_of(e) == (400, code)
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=locked_bucket, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "FOREVER", "Days": 1}}})
    assert error_of(e) == (400, "MalformedXML")
    # the refused requests left the bucket's default retention as it was
    cfg = s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"]
    assert cfg["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 2}


def test_plain_bucket_has_no_lock(s3):
    name = f"plain-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.get_object_lock_configuration(Bucket=name)
    assert error_of(e) == (404, "ObjectLockConfigurationNotFoundError")
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert error_of(e) == (409, "InvalidBucketState")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=name, Key="k", Body=b"x", ObjectLockMode="GOVERNANCE",
                      ObjectLockRetainUntilDate=later(3600))
    assert error_of(e) == (400, "InvalidRequest")
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=name, Key="k", Retention={"Mode": "GOVERNANCE",
                                                                 "RetainUntilDate": later(3600)})
    assert error_of(e) == (400, "InvalidRequest")
    # a versioned bucket may turn Object Lock on later
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    assert s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"]["ObjectLockEnabled"] == "Enabled"


def test_governance_retention_and_bypass(s3, locked_bucket):
    put = s3.put_object(Bucket=locked_bucket, Key="g", Body=b"gov", ObjectLockMode="GOVERNANCE",
                        ObjectLockRetainUntilDate=later(3600))
    vid = put["VersionId"]
    head = s3.head_object(Bucket=locked_bucket, Key="g")
    assert head["ObjectLockMode"] == "GOVERNANCE"
    assert abs((head["ObjectLockRetainUntilDate"] - later(3600)).total_seconds()) < 30
    ret = s3.get_object_retention(Bucket=locked_bucket, Key="g", VersionId=vid)["Retention"]
    assert ret["Mode"] == "GOVERNANCE"
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=locked_bucket, Key="g", VersionId=vid)
    assert error_of(e) == (403, "AccessDenied")
    with pytest.raises(ClientError) as e:   # shortening needs the bypass
        s3.put_object_retention(Bucket=locked_bucket, Key="g", VersionId=vid,
                                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(60)})
    assert error_of(e) == (403, "AccessDenied")
    s3.put_object_retention(Bucket=locked_bucket, Key="g", VersionId=vid,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": later(7200)})   # extending is free
    with pytest.raises(ClientError) as e:   # so does turning it into COMPLIANCE
        s3.put_object_retention(Bucket=locked_bucket, Key="g", VersionId=vid,
                                Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later(7200)})
    assert error_of(e) == (403, "AccessDenied")
    assert s3.get_object_retention(Bucket=locked_bucket, Key="g", VersionId=vid)["Retention"]["Mode"] == "GOVERNANCE"
    # a delete without a version id only adds a marker: the locked version stays
    marker = s3.delete_object(Bucket=locked_bucket, Key="g")
    assert marker["DeleteMarker"] is True
    assert s3.get_object(Bucket=locked_bucket, Key="g", VersionId=vid)["Body"].read() == b"gov"
    res = s3.delete_objects(Bucket=locked_bucket, Delete={"Objects": [{"Key": "g", "VersionId": vid}]})
    assert [(x["Key"], x["VersionId"], x["Code"]) for x in res["Errors"]] == [("g", vid, "AccessDenied")]
    s3.delete_object(Bucket=locked_bucket, Key="g", VersionId=vid, BypassGovernanceRetention=True)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=locked_bucket, Key="g", VersionId=vid)
    assert error_of(e)[0] == 404


def test_compliance_retention_cannot_be_shortened_or_bypassed(s3, locked_bucket):
    vid = s3.put_object(Bucket=locked_bucket, Key="c", Body=b"keep", ObjectLockMode="COMPLIANCE",
                        ObjectLockRetainUntilDate=later(3600))["VersionId"]
    for kwargs in ({}, {"BypassGovernanceRetention": True}):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=locked_bucket, Key="c", VersionId=vid, **kwargs)
        assert error_of(e) == (403, "AccessDenied")
    for retention in ({"Mode": "COMPLIANCE", "RetainUntilDate": later(60)},
                      {"Mode": "GOVERNANCE", "RetainUntilDate": later(7200)}):
        with pytest.raises(ClientError) as e:
            s3.put_object_retention(Bucket=locked_bucket, Key="c", VersionId=vid, Retention=retention,
                                    BypassGovernanceRetention=True)
        assert error_of(e) == (403, "AccessDenied")
    s3.put_object_retention(Bucket=locked_bucket, Key="c", VersionId=vid,
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later(7200)})
    assert s3.get_object(Bucket=locked_bucket, Key="c", VersionId=vid)["Body"].read() == b"keep"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=locked_bucket, Key="past", Body=b"x", ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=later(-3600))
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=locked_bucket, Key="c", VersionId="0000000000000000001.deadbeef")
    assert error_of(e)[0] == 404


def test_legal_hold(s3, locked_bucket):
    vid = s3.put_object(Bucket=locked_bucket, Key="h", Body=b"held", ObjectLockLegalHoldStatus="ON")["VersionId"]
    assert s3.head_object(Bucket=locked_bucket, Key="h")["ObjectLockLegalHoldStatus"] == "ON"
    assert s3.get_object_legal_hold(Bucket=locked_bucket, Key="h")["LegalHold"] == {"Status": "ON"}
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=locked_bucket, Key="h", VersionId=vid, BypassGovernanceRetention=True)
    assert error_of(e) == (403, "AccessDenied")
    s3.put_object_legal_hold(Bucket=locked_bucket, Key="h", VersionId=vid, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=locked_bucket, Key="h", VersionId=vid)
    other = s3.put_object(Bucket=locked_bucket, Key="n", Body=b"n")["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object_legal_hold(Bucket=locked_bucket, Key="n", VersionId=other)
    assert error_of(e) == (404, "NoSuchObjectLockConfiguration")
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=locked_bucket, Key="n", VersionId=other)
    assert error_of(e) == (404, "NoSuchObjectLockConfiguration")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=locked_bucket, Key="bad", Body=b"x", ObjectLockLegalHoldStatus="MAYBE")
    assert error_of(e) == (400, "InvalidArgument")


def test_malformed_lock_documents_get_400(lock_gateway, locked_bucket, s3):
    from services.object.tests.s3raw import sign
    import hashlib
    from services.object.tests.gatewayproc import ACCESS, SECRET
    s3.put_object(Bucket=locked_bucket, Key="m", Body=b"m")
    for query in ("object-lock", "m?retention", "m?legal-hold"):
        path, _, sub = query.partition("?")
        url = f"{lock_gateway.endpoint}/{locked_bucket}/{path}?{sub}" if sub else \
            f"{lock_gateway.endpoint}/{locked_bucket}?{path}"
        for body in (b"<<<", b"<Retention><Mode>NEVER</Mode></Retention>", b"<LegalHold><Status>on</Status></LegalHold>"):
            headers = sign("PUT", url, ACCESS, SECRET, hashlib.sha256(body).hexdigest())
            resp = requests.put(url, data=body, headers=headers, timeout=10)
            assert resp.status_code == 400 and b"<Code>MalformedXML</Code>" in resp.content, (url, body, resp.content)


def test_lifecycle_never_expires_a_locked_version(s3, locked_bucket, lock_gateway):
    old = s3.put_object(Bucket=locked_bucket, Key="ckpt/a", Body=b"v1", ObjectLockMode="COMPLIANCE",
                        ObjectLockRetainUntilDate=later(3600))["VersionId"]
    free = s3.put_object(Bucket=locked_bucket, Key="ckpt/b", Body=b"free-1")["VersionId"]
    s3.put_object(Bucket=locked_bucket, Key="ckpt/a", Body=b"v2")
    s3.put_object(Bucket=locked_bucket, Key="ckpt/b", Body=b"free-2")
    s3.put_bucket_lifecycle_configuration(Bucket=locked_bucket, LifecycleConfiguration={"Rules": [
        {"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "ckpt/"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})
    time.sleep(1.5)  # a lifecycle "day" is one second in this gateway
    resp = requests.post(f"{lock_gateway.endpoint}/_strata/admin/lifecycle",
                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    stats = resp.json()
    assert stats["versions_removed"] >= 1 and stats.get("held", 0) >= 1
    assert s3.get_object(Bucket=locked_bucket, Key="ckpt/a", VersionId=old)["Body"].read() == b"v1"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=locked_bucket, Key="ckpt/b", VersionId=free)
    assert error_of(e)[0] == 404

"""Bucket lifecycle through boto3; "days" are shortened to one second in this gateway's config.

Expiration here; transitions to the capacity tier and RestoreObject in test_tiers.py."""
from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from services.object.admin_client import GatewayAdminClient
from services.object.tests.gatewayproc import ADMIN_TOKEN, GatewayProcess


@pytest.fixture
def short_day_gateway(tmp_path):
    gw = GatewayProcess(str(tmp_path), lifecycle_day_seconds=1, lifecycle_interval=3600)
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()


def test_lifecycle_configuration_and_expiration(short_day_gateway):
    gw = short_day_gateway
    s3 = gw.client()
    s3.create_bucket(Bucket="lcb")
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket="lcb")
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
    rules = [{"ID": "tmp", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled", "Expiration": {"Days": 2}},
             {"ID": "old", "Filter": {"Prefix": "v/"}, "Status": "Enabled",
              "NoncurrentVersionExpiration": {"NoncurrentDays": 2}},
             {"ID": "mpu", "Filter": {"Prefix": ""}, "Status": "Enabled",
              "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}}]
    s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": rules})
    got = s3.get_bucket_lifecycle_configuration(Bucket="lcb")["Rules"]
    assert [r["ID"] for r in got] == ["tmp", "old", "mpu"]
    with pytest.raises(ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [
            {"ID": "t", "Filter": {"Prefix": ""}, "Status": "Enabled",
             "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]})
    # this gateway has no capacity tier: the refusal says so
    assert e.value.response["Error"]["Code"] == "InvalidStorageClass"
    assert "capacity" in e.value.response["Error"]["Message"]
    s3.put_bucket_versioning(Bucket="lcb", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="lcb", Key="tmp/a", Body=b"a")
    s3.put_object(Bucket="lcb", Key="keep/b", Body=b"b")
    s3.put_object(Bucket="lcb", Key="v/c", Body=b"c1")
    s3.put_object(Bucket="lcb", Key="v/c", Body=b"c2")
    s3.create_multipart_upload(Bucket="lcb", Key="big")
    time.sleep(2.2)
    admin = GatewayAdminClient(gw.endpoint, ADMIN_TOKEN)
    stats = admin.apply_lifecycle()
    assert stats == {"expired": 1, "versions_removed": 1, "uploads_aborted": 1, "transitioned": 0,
                     "transitioned_bytes": 0, "transition_failed": 0, "restores_expired": 0,
                     "cold_orphans_removed": 0}
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lcb")["Contents"]]
    assert keys == ["keep/b", "v/c"]
    assert s3.get_object(Bucket="lcb", Key="v/c")["Body"].read() == b"c2"
    assert [v["Key"] for v in s3.list_object_versions(Bucket="lcb", Prefix="v/")["Versions"]] == ["v/c"]
    assert not s3.list_multipart_uploads(Bucket="lcb").get("Uploads")
    s3.delete_bucket_lifecycle(Bucket="lcb")
    with pytest.raises(ClientError):
        s3.get_bucket_lifecycle_configuration(Bucket="lcb")


def test_restore_of_a_hot_object_is_invalid_object_state(s3, bucket):
    s3.put_object(Bucket=bucket, Key="hot", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.restore_object(Bucket=bucket, Key="hot", RestoreRequest={"Days": 1})
    assert e.value.response["Error"]["Code"] == "InvalidObjectState"


def test_a_rule_date_must_be_midnight_utc(s3, bucket):
    """S3 takes a rule's Date only at midnight GMT (400 InvalidArgument otherwise); the rule
    is not stored. (A Transition's Date is checked the same way; this gateway has no tier.)"""
    for action in ({"Expiration": {"Date": "2030-01-01T12:30:00Z"}},
                   {"Expiration": {"Date": "2030-01-01T00:00:01Z"}}):
        with pytest.raises(ClientError) as e:
            s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
                {"ID": "noon", "Filter": {"Prefix": ""}, "Status": "Enabled", **action}]})
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert e.value.response["Error"]["Code"] == "InvalidArgument", action
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "midnight", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "Expiration": {"Date": "2030-01-01T00:00:00Z"}}]})
    rule, = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert rule["Expiration"]["Date"].isoformat() == "2030-01-01T00:00:00+00:00"


def test_filters_by_tag_and_size_bounds_and_expiration_header(short_day_gateway):
    """Only versions carrying every tag of a rule's filter (and within its size bounds) expire;
    PUT, HEAD and GET name the rule that will expire an object in x-amz-expiration; days of 0
    are refused as S3 refuses them."""
    gw = short_day_gateway
    s3 = gw.client()
    s3.create_bucket(Bucket="lcf")
    for bad in ({"Expiration": {"Days": 0}}, {"NoncurrentVersionExpiration": {"NoncurrentDays": 0}},
                {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 0}}):
        with pytest.raises(ClientError) as e:
            s3.put_bucket_lifecycle_configuration(Bucket="lcf", LifecycleConfiguration={"Rules": [
                {"ID": "z", "Filter": {"Prefix": ""}, "Status": "Enabled", **bad}]})
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert e.value.response["Error"]["Code"] == "InvalidArgument", bad
    rules = [{"ID": "tagged", "Status": "Enabled", "Expiration": {"Days": 2},
              "Filter": {"And": {"Prefix": "t/", "Tags": [{"Key": "tmp", "Value": "yes"}, {"Key": "k", "Value": "v"}]}}},
             {"ID": "small", "Status": "Enabled", "Expiration": {"Days": 2},
              "Filter": {"And": {"Prefix": "s/", "ObjectSizeGreaterThan": 1, "ObjectSizeLessThan": 10}}}]
    s3.put_bucket_lifecycle_configuration(Bucket="lcf", LifecycleConfiguration={"Rules": rules})
    put = s3.put_object(Bucket="lcf", Key="t/both", Body=b"x", Tagging="tmp=yes&k=v")
    assert put["Expiration"].startswith('expiry-date="') and put["Expiration"].endswith('rule-id="tagged"')
    assert "Expiration" not in s3.put_object(Bucket="lcf", Key="t/one", Body=b"x", Tagging="tmp=yes")
    assert "Expiration" not in s3.put_object(Bucket="lcf", Key="t/none", Body=b"x")
    assert s3.head_object(Bucket="lcf", Key="t/both")["Expiration"] == put["Expiration"]
    assert s3.get_object(Bucket="lcf", Key="t/both")["Expiration"] == put["Expiration"]
    assert "Expiration" not in s3.head_object(Bucket="lcf", Key="t/one")
    copied = s3.copy_object(Bucket="lcf", Key="t/copy", CopySource={"Bucket": "lcf", "Key": "t/both"})
    assert copied["Expiration"].endswith('rule-id="tagged"')   # the copy keeps the source's tags
    up = s3.create_multipart_upload(Bucket="lcf", Key="t/mp", Tagging="tmp=yes&k=v")["UploadId"]
    etag = s3.upload_part(Bucket="lcf", Key="t/mp", UploadId=up, PartNumber=1, Body=b"m")["ETag"]
    done = s3.complete_multipart_upload(Bucket="lcf", Key="t/mp", UploadId=up,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert done["Expiration"].endswith('rule-id="tagged"')
    s3.put_object(Bucket="lcf", Key="s/tiny", Body=b"1")
    assert s3.put_object(Bucket="lcf", Key="s/mid", Body=b"12345")["Expiration"].endswith('rule-id="small"')
    s3.put_object(Bucket="lcf", Key="s/big", Body=b"x" * 10)
    time.sleep(2.2)
    stats = GatewayAdminClient(gw.endpoint, ADMIN_TOKEN).apply_lifecycle()
    assert stats["expired"] == 4
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lcf")["Contents"]]
    assert keys == ["s/big", "s/tiny", "t/none", "t/one"]

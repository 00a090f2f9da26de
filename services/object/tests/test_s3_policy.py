"""Bucket policies over the wire: conditions on the S3 and global keys, Not* elements, policy
variables, explicit deny, and PutBucketPolicy's validation (MalformedPolicy, never a 5xx).

One gateway for the module, with an owner (alice), two other users (bob, carol) and the admin.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import requests
from botocore.exceptions import ClientError

from plumbing import tls
from services.object.tests import s3raw
from services.object.tests.gatewayproc import (BOB, BOB_SECRET, USER_ACCESS, USER_SECRET,
                                                GatewayProcess)
from services.object.tests.gatewayproc import alice, bob, carol, gw  # noqa: F401 (fixtures)


@pytest.fixture
def name(alice):
    """A fresh bucket owned by alice."""
    bucket = f"pol-{uuid.uuid4().hex[:10]}"
    alice.create_bucket(Bucket=bucket)
    return bucket


def put_policy(client, bucket, *statements):
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17",
                                                               "Statement": list(statements)}))


def denied(call) -> bool:
    try:
        call()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "AccessDenied", exc.response
        assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        return True
    return False


def allow(principal, action, resource, condition=None, effect="Allow"):
    st = {"Effect": effect, "Principal": principal, "Action": action, "Resource": resource}
    if condition:
        st["Condition"] = condition
    return st


def test_source_ip_and_explicit_deny(alice, bob, name):
    alice.put_object(Bucket=name, Key="a", Body=b"a")
    arn = f"arn:aws:s3:::{name}/*"
    put_policy(alice, name, allow({"AWS": "bob"}, "s3:GetObject", arn, {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}))
    assert denied(lambda: bob.get_object(Bucket=name, Key="a"))
    put_policy(alice, name, allow({"AWS": ["arn:aws:iam::000000000000:user/bob"]}, "s3:GetObject", arn,
                                  {"IpAddress": {"aws:SourceIp": ["10.0.0.0/8", "127.0.0.0/8"]}}))
    assert bob.get_object(Bucket=name, Key="a")["Body"].read() == b"a"
    # a Deny that matches wins over the Allow, and binds the owner as well
    put_policy(alice, name,
               allow({"AWS": "bob"}, "s3:GetObject", arn),
               allow("*", "s3:GetObject", arn, {"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, effect="Deny"))
    assert denied(lambda: bob.get_object(Bucket=name, Key="a"))
    assert denied(lambda: alice.get_object(Bucket=name, Key="a"))
    # the owner can still replace the policy that locks it out
    alice.delete_bucket_policy(Bucket=name)
    assert alice.get_object(Bucket=name, Key="a")["Body"].read() == b"a"


def test_listing_keys_prefix_delimiter_max_keys(alice, bob, name):
    for key in ("home/bob/1", "home/bob/2", "home/carol/1"):
        alice.put_object(Bucket=name, Key=key, Body=b"x")
    put_policy(alice, name, allow({"AWS": "bob"}, "s3:ListBucket", f"arn:aws:s3:::{name}", {
        "StringLike": {"s3:prefix": ["home/bob/*", ""]},
        "StringEqualsIfExists": {"s3:delimiter": "/"},
        "NumericLessThanEquals": {"s3:max-keys": "100"}}))
    got = bob.list_objects_v2(Bucket=name, Prefix="home/bob/", MaxKeys=10)
    assert [o["Key"] for o in got["Contents"]] == ["home/bob/1", "home/bob/2"]
    assert bob.list_objects_v2(Bucket=name, Delimiter="/", MaxKeys=100)["CommonPrefixes"] == [{"Prefix": "home/"}]
    assert denied(lambda: bob.list_objects_v2(Bucket=name, Prefix="home/carol/", MaxKeys=10))
    assert denied(lambda: bob.list_objects_v2(Bucket=name, Prefix="home/bob/", MaxKeys=101))
    assert denied(lambda: bob.list_objects_v2(Bucket=name, Prefix="home/bob/", Delimiter="|", MaxKeys=10))
    assert denied(lambda: bob.list_objects_v2(Bucket=name, Prefix="home/bob/"))  # no max-keys: Numeric is false


def test_forwarding_headers_do_not_change_source_ip_or_transport(alice, bob, name):
    """X-Forwarded-For and X-Forwarded-Proto are the client's words, not facts: a client on
    this host cannot pass an aws:SourceIp or aws:SecureTransport condition by sending them."""
    alice.put_object(Bucket=name, Key="a", Body=b"a")
    arn = f"arn:aws:s3:::{name}/*"
    put_policy(alice, name,
               allow({"AWS": "bob"}, "s3:GetObject", arn, {"IpAddress": {"aws:SourceIp": "10.1.2.3/32"}}),
               allow("*", "s3:GetObject", arn, {"Bool": {"aws:SecureTransport": "false"}}, effect="Deny"))

    def forwarded(request, **kwargs):
        request.headers["X-Forwarded-For"] = "10.1.2.3"
        request.headers["X-Forwarded-Proto"] = "https"

    for client in (alice, bob):
        client.meta.events.register("before-sign.s3.GetObject", forwarded)
    try:
        assert denied(lambda: bob.get_object(Bucket=name, Key="a"))
        assert denied(lambda: alice.get_object(Bucket=name, Key="a"))
    finally:
        for client in (alice, bob):
            client.meta.events.unregister("before-sign.s3.GetObject", forwarded)


def test_over_tls_the_transport_is_secure_and_the_source_ip_the_peers(tmp_path):
    """A gateway serving HTTPS tells the policy the request came over TLS, and from where."""
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    tls.make_self_signed(Path(cert), Path(key), [])
    g = GatewayProcess(str(tmp_path), tls=(cert, key))
    g.write_config({USER_ACCESS: {"secret_key": USER_SECRET, "user": "alice"},
                    BOB: {"secret_key": BOB_SECRET, "user": "bob"}})
    g.start()
    owner, other = g.client(USER_ACCESS, USER_SECRET), g.client(BOB, BOB_SECRET)
    try:
        owner.create_bucket(Bucket="secure")
        owner.put_object(Bucket="secure", Key="a", Body=b"a")
        arn = "arn:aws:s3:::secure/*"
        put_policy(owner, "secure",
                   allow({"AWS": "bob"}, "s3:GetObject", arn, {"IpAddress": {"aws:SourceIp": "127.0.0.1/32"}}),
                   allow("*", "s3:GetObject", arn, {"Bool": {"aws:SecureTransport": "false"}}, effect="Deny"))
        assert owner.get_object(Bucket="secure", Key="a")["Body"].read() == b"a"
        assert other.get_object(Bucket="secure", Key="a")["Body"].read() == b"a"
    finally:
        g.stop()


def test_request_headers_and_null(alice, bob, name):
    arn = f"arn:aws:s3:::{name}/*"
    put_policy(alice, name,
               allow({"AWS": "bob"}, "s3:PutObject", arn),
               allow("*", "s3:PutObject", arn, {"Null": {"s3:x-amz-server-side-encryption": "true"}}, effect="Deny"),
               allow("*", "s3:PutObject", arn, {"StringNotEqualsIfExists": {"s3:x-amz-acl": "bucket-owner-full-control"}},
                     effect="Deny"))
    assert denied(lambda: bob.put_object(Bucket=name, Key="plain", Body=b"x"))
    assert denied(lambda: bob.put_object(Bucket=name, Key="acl", Body=b"x", ServerSideEncryption="AES256",
                                         ACL="public-read"))
    bob.put_object(Bucket=name, Key="ok", Body=b"x", ServerSideEncryption="AES256", ACL="bucket-owner-full-control")
    # ...IfExists: an absent key makes the condition true, so this Deny applies
    assert denied(lambda: bob.put_object(Bucket=name, Key="ok2", Body=b"x", ServerSideEncryption="AES256"))
    assert alice.head_object(Bucket=name, Key="ok")["ContentLength"] == 1


def test_object_tags_existing_and_requested(alice, bob, name):
    alice.put_object(Bucket=name, Key="pub", Body=b"p", Tagging="public=yes&team=red")
    alice.put_object(Bucket=name, Key="priv", Body=b"q", Tagging="public=no")
    arn = f"arn:aws:s3:::{name}/*"
    put_policy(alice, name,
               allow({"AWS": "bob"}, "s3:GetObject", arn, {"StringEquals": {"s3:ExistingObjectTag/public": "yes"}}),
               allow({"AWS": "bob"}, "s3:PutObject", arn, {
                   "StringEquals": {"s3:RequestObjectTag/team": "blue"},
                   "ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["team", "owner"]}}))
    assert bob.get_object(Bucket=name, Key="pub")["Body"].read() == b"p"
    assert denied(lambda: bob.get_object(Bucket=name, Key="priv"))
    assert denied(lambda: bob.get_object(Bucket=name, Key="missing"))
    bob.put_object(Bucket=name, Key="new", Body=b"n", Tagging="team=blue&owner=bob")
    assert denied(lambda: bob.put_object(Bucket=name, Key="new2", Body=b"n", Tagging="team=red"))
    assert denied(lambda: bob.put_object(Bucket=name, Key="new3", Body=b"n", Tagging="team=blue&cost=1"))
    assert denied(lambda: bob.put_object(Bucket=name, Key="new4", Body=b"n"))


def test_not_principal_not_action_not_resource(alice, bob, carol, name):
    for key in ("open/a", "secret/b"):
        alice.put_object(Bucket=name, Key=key, Body=b"x")
    bucket_arn = f"arn:aws:s3:::{name}"
    put_policy(alice, name,
               # everything but deletes, on everything but secret/, for everyone
               {"Effect": "Allow", "Principal": "*", "NotAction": ["s3:Delete*", "s3:Put*"],
                "NotResource": f"{bucket_arn}/secret/*"},
               # secret/ only for bob (and the owner): a Deny for everyone who is not bob or alice
               {"Effect": "Deny", "NotPrincipal": {"AWS": ["bob", "alice"]}, "Action": "s3:*",
                "Resource": f"{bucket_arn}/secret/*"},
               allow({"AWS": "bob"}, "s3:GetObject", f"{bucket_arn}/secret/*"))
    assert carol.get_object(Bucket=name, Key="open/a")["Body"].read() == b"x"
    assert len(carol.list_objects_v2(Bucket=name)["Contents"]) == 2
    assert denied(lambda: carol.delete_object(Bucket=name, Key="open/a"))
    assert denied(lambda: carol.put_object(Bucket=name, Key="open/c", Body=b"c"))
    assert denied(lambda: carol.get_object(Bucket=name, Key="secret/b"))
    assert bob.get_object(Bucket=name, Key="secret/b")["Body"].read() == b"x"
    assert alice.get_object(Bucket=name, Key="secret/b")["Body"].read() == b"x"


def test_policy_variables_and_wildcard_resources(alice, bob, carol, name):
    for key in ("home/bob/x", "home/carol/x"):
        alice.put_object(Bucket=name, Key=key, Body=key.encode())
    put_policy(alice, name, allow("*", ["s3:GetObject", "s3:PutObject"], "arn:aws:s3:::*/home/${aws:username}/*"))
    assert bob.get_object(Bucket=name, Key="home/bob/x")["Body"].read() == b"home/bob/x"
    assert carol.get_object(Bucket=name, Key="home/carol/x")["Body"].read() == b"home/carol/x"
    bob.put_object(Bucket=name, Key="home/bob/new", Body=b"n")
    assert denied(lambda: bob.get_object(Bucket=name, Key="home/carol/x"))
    assert denied(lambda: bob.put_object(Bucket=name, Key="home/carol/new", Body=b"n"))


def test_global_keys_transport_time_agent_referer_version(gw, alice, bob, name):
    alice.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    v1 = alice.put_object(Bucket=name, Key="k", Body=b"1")["VersionId"]
    alice.put_object(Bucket=name, Key="k", Body=b"2")
    arn = f"arn:aws:s3:::{name}/*"
    # plain HTTP is not secure transport: a Deny on it refuses everyone
    put_policy(alice, name, allow("*", "s3:GetObject", arn, {"Bool": {"aws:SecureTransport": "false"}}, effect="Deny"))
    assert denied(lambda: alice.get_object(Bucket=name, Key="k"))
    put_policy(alice, name, allow({"AWS": "bob"}, ["s3:GetObject", "s3:GetObjectVersion"], arn, {
        "DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"},
        "DateLessThan": {"aws:CurrentTime": "2999-01-01T00:00:00Z"},
        "StringLike": {"aws:UserAgent": "*Boto3*", "aws:Referer": "https://app.example.com/*"}}),
        allow({"AWS": "bob"}, "s3:GetObjectVersion", arn, {"StringEquals": {"s3:VersionId": v1}}, effect="Deny"))
    assert denied(lambda: bob.get_object(Bucket=name, Key="k"))  # no Referer

    def add_referer(request, **kwargs):
        request.headers["Referer"] = "https://app.example.com/page"

    bob.meta.events.register("before-sign.s3.GetObject", add_referer)
    try:
        assert bob.get_object(Bucket=name, Key="k")["Body"].read() == b"2"
        assert denied(lambda: bob.get_object(Bucket=name, Key="k", VersionId=v1))
    finally:
        bob.meta.events.unregister("before-sign.s3.GetObject", add_referer)
    put_policy(alice, name, allow({"AWS": "bob"}, "s3:GetObject", arn,
                                  {"DateLessThan": {"aws:CurrentTime": "2001-01-01T00:00:00Z"}}))
    assert denied(lambda: bob.get_object(Bucket=name, Key="k"))


def test_copy_source_is_checked_against_its_policy(alice, bob, name):
    alice.put_object(Bucket=name, Key="src", Body=b"s")
    dest = f"dst-{uuid.uuid4().hex[:8]}"
    bob.create_bucket(Bucket=dest)
    assert denied(lambda: bob.copy_object(Bucket=dest, Key="c", CopySource={"Bucket": name, "Key": "src"}))
    put_policy(alice, name, allow({"AWS": "bob"}, "s3:GetObject", f"arn:aws:s3:::{name}/src"))
    bob.copy_object(Bucket=dest, Key="c", CopySource={"Bucket": name, "Key": "src"})
    assert bob.get_object(Bucket=dest, Key="c")["Body"].read() == b"s"


BAD_POLICIES = [
    ("{not json", "Policies must be valid JSON and the first byte must be '{'"),
    ('["array"]', "Policies must be valid JSON and the first byte must be '{'"),
    ('{"Version": "2012-10-17"}', "Missing required field Statement"),
    ('{"Statement": [{"Principal": "*", "Action": "s3:GetObject", "Resource": "R"}]}', "Missing required field Effect"),
    ('{"Statement": [{"Effect": "Perhaps", "Principal": "*", "Action": "s3:GetObject", "Resource": "R"}]}',
     "Invalid effect: Perhaps"),
    ('{"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "R"}]}',
     "Missing required field Principal"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Resource": "R"}]}', "Missing required field Action"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObjekt", "Resource": "R"}]}',
     "Policy has invalid action"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", '
     '"Resource": "arn:aws:s3:::another-bucket/*"}]}', "Policy has invalid resource"),
    ('{"Statement": [{"Effect": "Allow", "Principal": {"Nobody": "x"}, "Action": "s3:GetObject", "Resource": "R"}]}',
     "Invalid principal in policy"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "R", '
     '"Condition": {"StringEqualz": {"s3:prefix": "a"}}}]}', "Invalid Condition type : StringEqualz"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "R", '
     '"Condition": {"StringEquals": {"s3:no-such-key": "a"}}}]}', "Policy has an invalid condition key"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "R", '
     '"Condition": {"NumericLessThan": {"s3:max-keys": "ten"}}}]}', "Invalid numeric value 'ten' for condition NumericLessThan"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "R", '
     '"Condition": {"IpAddress": {"aws:SourceIp": "300.1.1.1/8"}}}]}',
     "Invalid IP address or CIDR block '300.1.1.1/8' in condition IpAddress"),
    ('{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "R", "Extra": 1}]}',
     "Unknown field Extra"),
]


def test_put_policy_validation(gw, alice, name):
    url = f"{gw.endpoint}/{name}?policy"
    for text, message in BAD_POLICIES:
        body = text.replace('"R"', f'"arn:aws:s3:::{name}/*"').encode()
        headers = s3raw.sign("PUT", url, USER_ACCESS, USER_SECRET, s3raw.hashlib.sha256(body).hexdigest())
        r = requests.put(url, data=body, headers=headers)
        assert r.status_code == 400, (text, r.text)
        assert "<Code>MalformedPolicy</Code>" in r.text and f"<Message>{message}</Message>" in \
            r.text.replace("&apos;", "'").replace("&#x27;", "'"), (text, r.text)
    big = {"Statement": [allow("*", "s3:GetObject", f"arn:aws:s3:::{name}/{'k' * 100}{i}") for i in range(200)]}
    with pytest.raises(ClientError) as e:
        alice.put_bucket_policy(Bucket=name, Policy=json.dumps(big))
    assert e.value.response["Error"]["Code"] == "MalformedPolicy"
    assert e.value.response["Error"]["Message"] == "Policies must not exceed 20480 bytes (20 KB)"
    with pytest.raises(ClientError) as e:
        alice.get_bucket_policy(Bucket=name)
    assert e.value.response["Error"]["Code"] == "NoSuchBucketPolicy"
    # a policy for every bucket (arn:aws:s3:::*) is a valid policy of this one
    put_policy(alice, name, allow({"AWS": "bob"}, "s3:*", "arn:aws:s3:::*"))
    assert json.loads(alice.get_bucket_policy(Bucket=name)["Policy"])["Statement"][0]["Resource"] == "arn:aws:s3:::*"


def test_multi_delete_checks_every_key(alice, bob, carol, name):
    for key in ("tmp/a", "keep/b"):
        alice.put_object(Bucket=name, Key=key, Body=b"x")
    put_policy(alice, name, allow({"AWS": "bob"}, "s3:DeleteObject", f"arn:aws:s3:::{name}/tmp/*"))
    out = bob.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "tmp/a"}, {"Key": "keep/b"}]})
    assert [d["Key"] for d in out["Deleted"]] == ["tmp/a"]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("keep/b", "AccessDenied")]
    # a Deny on the keys binds the owner's multi-delete too; denied every key, the request is refused
    alice.put_object(Bucket=name, Key="tmp/c", Body=b"x")
    put_policy(alice, name, allow("*", "s3:DeleteObject", f"arn:aws:s3:::{name}/keep/*", effect="Deny"))
    out = alice.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "keep/b"}, {"Key": "tmp/c"}]})
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("keep/b", "AccessDenied")]
    assert [d["Key"] for d in out["Deleted"]] == ["tmp/c"]
    for client in (alice, carol):
        assert denied(lambda: client.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "keep/b"}]}))
    assert alice.get_object(Bucket=name, Key="keep/b")["Body"].read() == b"x"
def test_tenants_see_nothing_of_each_other_unless_a_policy_says_so(alice, bob, carol, name):
    """S3 users are the tenants: bob reaches none of alice's bucket by any operation (403,
    and it is not in his listing) until alice's policy grants him reads, which then are all
    he gets; carol, not named, still gets nothing."""
    alice.put_object(Bucket=name, Key="secret", Body=b"alice's weights")
    mine = f"bob-{uuid.uuid4().hex[:8]}"
    bob.create_bucket(Bucket=mine)
    policy = json.dumps({"Statement": [allow("*", "s3:GetObject", f"arn:aws:s3:::{name}/*")]})
    on_alice = {
        "ListObjectsV2": lambda c: c.list_objects_v2(Bucket=name),
        "ListObjects": lambda c: c.list_objects(Bucket=name),
        "ListObjectVersions": lambda c: c.list_object_versions(Bucket=name),
        "ListMultipartUploads": lambda c: c.list_multipart_uploads(Bucket=name),
        "GetObject": lambda c: c.get_object(Bucket=name, Key="secret"),
        "GetObjectTagging": lambda c: c.get_object_tagging(Bucket=name, Key="secret"),
        "CopyObject": lambda c: c.copy_object(Bucket=mine, Key="stolen",
                                              CopySource={"Bucket": name, "Key": "secret"}),
        "PutObject": lambda c: c.put_object(Bucket=name, Key="planted", Body=b"x"),
        "PutObjectTagging": lambda c: c.put_object_tagging(
            Bucket=name, Key="secret", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}),
        "CreateMultipartUpload": lambda c: c.create_multipart_upload(Bucket=name, Key="m"),
        "DeleteObject": lambda c: c.delete_object(Bucket=name, Key="secret"),
        "DeleteObjects": lambda c: c.delete_objects(
            Bucket=name, Delete={"Objects": [{"Key": "secret"}]}),
        "GetBucketPolicy": lambda c: c.get_bucket_policy(Bucket=name),
        "PutBucketPolicy": lambda c: c.put_bucket_policy(Bucket=name, Policy=policy),
        "DeleteBucketPolicy": lambda c: c.delete_bucket_policy(Bucket=name),
        "GetBucketVersioning": lambda c: c.get_bucket_versioning(Bucket=name),
        "PutBucketVersioning": lambda c: c.put_bucket_versioning(
            Bucket=name, VersioningConfiguration={"Status": "Enabled"}),
        "GetBucketLifecycleConfiguration": lambda c: c.get_bucket_lifecycle_configuration(
            Bucket=name),
        "GetBucketTagging": lambda c: c.get_bucket_tagging(Bucket=name),
        "DeleteBucket": lambda c: c.delete_bucket(Bucket=name),
    }
    for client in (bob, carol):
        allowed = [op for op, call in on_alice.items() if not denied(lambda: call(client))]
        assert allowed == [], allowed
        with pytest.raises(ClientError) as head:
            client.head_bucket(Bucket=name)
        assert head.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        with pytest.raises(ClientError) as head:
            client.head_object(Bucket=name, Key="secret")
        assert head.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert name not in [b["Name"] for b in client.list_buckets()["Buckets"]]
        with pytest.raises(ClientError) as taken:  # the name is taken, nothing more is told
            client.create_bucket(Bucket=name)
        assert taken.value.response["Error"]["Code"] == "BucketAlreadyExists"
    assert alice.get_object(Bucket=name, Key="secret")["Body"].read() == b"alice's weights"
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=name)["Contents"]] == ["secret"]

    # alice's policy lets bob read: exactly reads, and only bob
    put_policy(alice, name, allow({"AWS": ["bob"]}, ["s3:GetObject", "s3:ListBucket"],
                                  [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"]))
    assert bob.get_object(Bucket=name, Key="secret")["Body"].read() == b"alice's weights"
    assert [o["Key"] for o in bob.list_objects_v2(Bucket=name)["Contents"]] == ["secret"]
    reads = {"ListObjectsV2", "ListObjects", "GetObject", "CopyObject"}
    still = [op for op, call in on_alice.items() if op not in reads and not denied(lambda: call(bob))]
    assert still == [], still
    assert [op for op, call in on_alice.items() if not denied(lambda: call(carol))] == []
    assert name not in [b["Name"] for b in bob.list_buckets()["Buckets"]]


def test_bypass_governance_retention_is_a_policy_action(gw, alice, bob):
    """``x-amz-bypass-governance-retention: true`` works only for callers allowed
    s3:BypassGovernanceRetention: the owner (until a policy denies it) and admins, others only
    through a policy Allow (an Allow of s3:DeleteObjectVersion is not enough). Refused: 403
    AccessDenied, and the version stays."""
    import datetime as dt
    bucket = f"worm-{uuid.uuid4().hex[:10]}"
    alice.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    until = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(hours=1)

    def locked(key):
        return alice.put_object(Bucket=bucket, Key=key, Body=b"ckpt", ObjectLockMode="GOVERNANCE",
                                ObjectLockRetainUntilDate=until)["VersionId"]

    def shorten(client, key, vid):
        client.put_object_retention(Bucket=bucket, Key=key, VersionId=vid, BypassGovernanceRetention=True,
                                    Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until - dt.timedelta(minutes=30)})

    vid = locked("owner")
    alice.delete_object(Bucket=bucket, Key="owner", VersionId=vid, BypassGovernanceRetention=True)

    deny = allow("*", "s3:BypassGovernanceRetention", f"arn:aws:s3:::{bucket}/*", effect="Deny")
    put_policy(alice, bucket, deny)
    vid = locked("denied")
    assert denied(lambda: alice.delete_object(Bucket=bucket, Key="denied", VersionId=vid,
                                              BypassGovernanceRetention=True))
    assert denied(lambda: shorten(alice, "denied", vid))
    res = alice.delete_objects(Bucket=bucket, BypassGovernanceRetention=True,
                               Delete={"Objects": [{"Key": "denied", "VersionId": vid}]})
    assert [(e["Key"], e["Code"]) for e in res["Errors"]] == [("denied", "AccessDenied")]
    assert alice.get_object(Bucket=bucket, Key="denied", VersionId=vid)["Body"].read() == b"ckpt"
    admin = gw.client()   # an admin key is not bound by bucket policies
    admin.delete_object(Bucket=bucket, Key="denied", VersionId=vid, BypassGovernanceRetention=True)

    delete_versions = allow({"AWS": "bob"}, ["s3:DeleteObjectVersion", "s3:PutObjectRetention"],
                            f"arn:aws:s3:::{bucket}/*")
    put_policy(alice, bucket, delete_versions)
    vid = locked("other")
    assert denied(lambda: bob.delete_object(Bucket=bucket, Key="other", VersionId=vid,
                                            BypassGovernanceRetention=True))
    assert denied(lambda: shorten(bob, "other", vid))
    put_policy(alice, bucket, delete_versions,
               allow({"AWS": "bob"}, "s3:BypassGovernanceRetention", f"arn:aws:s3:::{bucket}/*"))
    shorten(bob, "other", vid)
    bob.delete_object(Bucket=bucket, Key="other", VersionId=vid, BypassGovernanceRetention=True)
    assert [v["Key"] for v in alice.list_object_versions(Bucket=bucket).get("Versions", [])] == []

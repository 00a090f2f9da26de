"""The route table (gateway/routes.py): every route has an IAM action of the policy grammar,
every action of the grammar has a route (or is listed as knowingly not one), a request that
names several sub-resources runs one operation and is authorized as that operation, and
access is decided before a request's body or its unsupported sub-resource is looked at.

Over the wire: one gateway with an owner (alice), another user (bob) and anonymous callers,
raw SigV4 requests (botocore's signer) for the shapes boto3 does not send.
"""
from __future__ import annotations

import base64
import hashlib
import inspect
import json
import uuid
from xml.etree import ElementTree

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.gateway import policy, routes
from services.object.tests import s3raw
from services.object.tests.gatewayproc import BOB, BOB_SECRET, USER_ACCESS, USER_SECRET
from services.object.tests.gatewayproc import alice, bob, gw  # noqa: F401 (fixtures)


# -- the table -------------------------------------------------------------------------------


def test_every_route_has_an_action_of_the_policy_grammar_and_one_handler_signature():
    for shape, route in routes.ROUTES.items():
        for action in filter(None, (route.action, route.version_action)):
            assert action.startswith("s3:") and action[3:].lower() in policy.S3_ACTIONS, (shape, action)
        assert route.checks in (routes.AUTHORIZE, routes.EACH_KEY, routes.HANDLER), shape
        assert inspect.iscoroutinefunction(route.handler), shape
        assert list(inspect.signature(route.handler).parameters)[:3] == ["gw", "req", "bucket"], shape


def test_every_action_of_the_policy_grammar_has_a_route_or_a_reason():
    routed = {a.lower() for r in routes.ROUTES.values() for a in (r.action, r.version_action) if a}
    not_routed = {a.lower() for a in routes.NOT_ROUTED}
    assert not routed & not_routed
    missing = {a for a in policy.S3_ACTIONS if f"s3:{a}" not in routed | not_routed}
    assert not missing, sorted(missing)


def test_unsupported_sub_resources_are_routes_at_both_levels_for_every_method():
    for name in routes.UNSUPPORTED:
        for level in (routes.BUCKET, routes.OBJECT):
            for method in routes.METHODS:
                assert (level, method, "?" + name) in routes.ROUTES


@pytest.mark.parametrize("level, method, query, headers, operation, action", [
    # two sub-resources at once: one operation, authorized as itself
    ("object", "PUT", {"uploadId": "u", "partNumber": "1", "tagging": ""}, {}, "UploadPart", "s3:PutObject"),
    ("object", "PUT", {"uploadId": "u", "partNumber": "1", "acl": ""}, {"x-amz-copy-source": "b/k"},
     "UploadPartCopy", "s3:PutObject"),
    ("object", "PUT", {"tagging": "", "acl": ""}, {}, "PutObjectTagging", "s3:PutObjectTagging"),
    ("object", "PUT", {"tagging": ""}, {"x-amz-copy-source": "b/k"}, "PutObjectTagging", "s3:PutObjectTagging"),
    ("object", "GET", {"uploadId": "u", "tagging": ""}, {}, "ListParts", "s3:ListMultipartUploadParts"),
    ("object", "GET", {"tagging": "", "versionId": "v"}, {}, "GetObjectTagging", "s3:GetObjectVersionTagging"),
    ("object", "POST", {"uploads": "", "uploadId": "u"}, {}, "CreateMultipartUpload", "s3:PutObject"),
    ("object", "DELETE", {"uploadId": "u", "tagging": ""}, {}, "AbortMultipartUpload", "s3:AbortMultipartUpload"),
    ("bucket", "GET", {"versions": "", "policy": ""}, {}, "ListObjectVersions", "s3:ListBucketVersions"),
    ("bucket", "GET", {"versions": "", "uploads": ""}, {}, "ListObjectVersions", "s3:ListBucketVersions"),
    ("bucket", "GET", {"acl": "", "policy": ""}, {}, "GetBucketPolicy", "s3:GetBucketPolicy"),
    ("bucket", "PUT", {"policy": "", "acl": ""}, {}, "PutBucketPolicy", "s3:PutBucketPolicy"),
    ("bucket", "GET", {"versions": "", "logging": ""}, {}, "Get(logging), not configured", "s3:GetBucketLogging"),
    ("bucket", "POST", {"delete": ""}, {"content-type": "multipart/form-data; boundary=x"}, "DeleteObjects",
     "s3:DeleteObject"),
    # a sub-resource without a route for the method: the plain operation, authorized as such
    ("object", "DELETE", {"acl": ""}, {}, "DeleteObject", "s3:DeleteObject"),
    ("object", "DELETE", {"retention": "", "versionId": "v"}, {}, "DeleteObject", "s3:DeleteObjectVersion"),
    ("object", "HEAD", {"acl": ""}, {}, "HeadObject", "s3:GetObject"),
    ("object", "PUT", {"attributes": ""}, {}, "PutObject", "s3:PutObject"),
    ("bucket", "DELETE", {"acl": ""}, {}, "DeleteBucket", "s3:DeleteBucket"),
    ("bucket", "HEAD", {"policy": ""}, {}, "HeadBucket", "s3:ListBucket"),
    ("bucket", "PUT", {"versions": ""}, {}, "CreateBucket", "s3:CreateBucket"),
    # folded in: the copy source of a PUT, the form of a bucket POST
    ("object", "PUT", {}, {"x-amz-copy-source": "b/k"}, "CopyObject", "s3:PutObject"),
    ("bucket", "POST", {}, {"content-type": "multipart/form-data; boundary=x"}, "PostObject", "s3:PutObject"),
    ("service", "GET", {}, {}, "ListBuckets", "s3:ListAllMyBuckets"),
])
def test_one_shape_one_operation_one_action(level, method, query, headers, operation, action):
    route = routes.resolve(level, method, query, headers)
    assert (route.operation, route.action_for(query)) == (operation, action)


def test_methods_without_a_route():
    assert routes.resolve("bucket", "POST", {}, {}) is None
    assert routes.resolve("object", "POST", {}, {}) is None
    assert routes.resolve("service", "PUT", {}, {}) is None
    assert routes.resolve("bucket", "PATCH", {"acl": ""}, {}) is None


def test_a_method_s3_does_not_have_is_method_not_allowed(gw, alice, name):
    for url in (f"{gw.endpoint}/{name}?acl", f"{gw.endpoint}/{name}/k?tagging", f"{gw.endpoint}/{name}"):
        r = signed("PATCH", url)
        assert (r.status_code, code(r)) == (405, "MethodNotAllowed"), (url, r.text)


# -- over the wire ---------------------------------------------------------------------------


@pytest.fixture
def name(alice):
    """A fresh bucket owned by alice."""
    bucket = f"rt-{uuid.uuid4().hex[:10]}"
    alice.create_bucket(Bucket=bucket)
    return bucket


def deny(client, bucket, action, resource):
    statement = {"Effect": "Deny", "Principal": "*", "Action": action, "Resource": resource}
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]}))


def signed(method, url, access=USER_ACCESS, secret=USER_SECRET, body=b"", headers=None):
    """A raw request signed with SigV4 by botocore's signer."""
    h = s3raw.sign(method, url, access, secret, hashlib.sha256(body).hexdigest(), headers)
    return requests.request(method, url, data=body, headers=h)


def code(r) -> str:
    return ElementTree.fromstring(r.content).findtext("Code") if r.content else ""


def test_an_extra_sub_resource_does_not_sidestep_a_denied_upload_part(gw, alice, name):
    """PUT ?partNumber&uploadId&tagging runs UploadPart: a policy denying s3:PutObject refuses
    it, as it refuses the plain UploadPart (it was authorized as s3:PutObjectTagging)."""
    upload = alice.create_multipart_upload(Bucket=name, Key="k")["UploadId"]
    deny(alice, name, "s3:PutObject", f"arn:aws:s3:::{name}/*")
    base = f"{gw.endpoint}/{name}/k?partNumber=1&uploadId={upload}"
    assert (signed("PUT", base, body=b"part").status_code, code(signed("PUT", base, body=b"part"))) == \
        (403, "AccessDenied")
    r = signed("PUT", base + "&tagging", body=b"part")
    assert (r.status_code, code(r)) == (403, "AccessDenied"), r.text
    assert "ETag" not in r.headers
    assert alice.list_parts(Bucket=name, Key="k", UploadId=upload).get("Parts", []) == []


def test_an_extra_sub_resource_does_not_sidestep_a_denied_version_listing(gw, alice, name):
    """GET ?versions&policy lists versions: a policy denying s3:ListBucketVersions refuses it
    (it was authorized as s3:GetBucketPolicy, which the owner always keeps)."""
    alice.put_object(Bucket=name, Key="secret-name", Body=b"x")
    deny(alice, name, "s3:ListBucketVersions", f"arn:aws:s3:::{name}")
    r = signed("GET", f"{gw.endpoint}/{name}?versions&policy")
    assert (r.status_code, code(r)) == (403, "AccessDenied"), r.text
    assert b"secret-name" not in r.content
    # the policy itself stays readable by its owner
    assert json.loads(alice.get_bucket_policy(Bucket=name)["Policy"])["Statement"][0]["Effect"] == "Deny"


def test_a_sub_resource_without_a_delete_does_not_sidestep_a_denied_delete(gw, alice, name):
    """DELETE key?acl and DELETE bucket?acl delete the object and the bucket (S3 has no
    DeleteObjectAcl): they are authorized as DeleteObject and DeleteBucket, not PutObjectAcl."""
    alice.put_object(Bucket=name, Key="keep", Body=b"kept")
    deny(alice, name, ["s3:DeleteObject", "s3:DeleteBucket"], [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"])
    for url in (f"{gw.endpoint}/{name}/keep?acl", f"{gw.endpoint}/{name}/keep?retention", f"{gw.endpoint}/{name}?acl"):
        r = signed("DELETE", url)
        assert (r.status_code, code(r)) == (403, "AccessDenied"), (url, r.text)
    assert alice.get_object(Bucket=name, Key="keep")["Body"].read() == b"kept"
    alice.delete_bucket_policy(Bucket=name)
    assert signed("DELETE", f"{gw.endpoint}/{name}/keep?acl").status_code == 204
    assert alice.list_objects_v2(Bucket=name)["KeyCount"] == 0


def test_head_with_a_sub_resource_is_authorized_as_head_object(gw, alice, name):
    alice.put_object(Bucket=name, Key="o", Body=b"x")
    deny(alice, name, "s3:GetObject", f"arn:aws:s3:::{name}/*")
    r = signed("HEAD", f"{gw.endpoint}/{name}/o?acl")
    assert r.status_code == 403
    assert alice.get_object_acl(Bucket=name, Key="o")["Grants"]  # GetObjectAcl itself is not denied


def test_anonymous_requests_are_refused_before_unsupported_sub_resources(gw, alice, name):
    """AWS authorizes first: an anonymous PUT ?logging is AccessDenied, not NotImplemented; the
    owner gets NotImplemented, and a GET of an unconfigured setting its "not configured" answer."""
    body = b"<BucketLoggingStatus/>"
    for sub in ("logging", "website", "analytics&id=a"):
        r = requests.put(f"{gw.endpoint}/{name}?{sub}", data=body)
        assert (r.status_code, code(r)) == (403, "AccessDenied"), (sub, r.text)
        r = signed("PUT", f"{gw.endpoint}/{name}?{sub}", body=body)
        assert (r.status_code, code(r)) == (501, "NotImplemented"), (sub, r.text)
    r = requests.get(f"{gw.endpoint}/{name}?website")
    assert (r.status_code, code(r)) == (403, "AccessDenied")
    r = signed("GET", f"{gw.endpoint}/{name}?website")
    assert (r.status_code, code(r)) == (404, "NoSuchWebsiteConfiguration")
    r = requests.put(f"{gw.endpoint}/no-such-bucket-{uuid.uuid4().hex[:6]}?logging", data=body)
    assert (r.status_code, code(r)) == (404, "NoSuchBucket")


def test_delete_objects_refuses_a_caller_who_may_delete_nothing_before_reading_the_body(gw, alice, bob, name):
    alice.put_object(Bucket=name, Key="a", Body=b"a")
    url = f"{gw.endpoint}/{name}?delete"
    junk = b"not xml at all"
    r = requests.post(url, data=junk)
    assert (r.status_code, code(r)) == (403, "AccessDenied"), r.text
    r = signed("POST", url, BOB, BOB_SECRET, body=junk)
    assert (r.status_code, code(r)) == (403, "AccessDenied"), r.text
    md5 = {"Content-MD5": base64.b64encode(hashlib.md5(junk).digest()).decode()}
    r = signed("POST", url, body=junk, headers=md5)  # the owner: the body is read, and is not XML
    assert (r.status_code, code(r)) == (400, "MalformedXML"), r.text
    # a policy that lets bob delete under a prefix: the request is read, each key checked
    alice.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "bob"}, "Action": "s3:DeleteObject",
        "Resource": f"arn:aws:s3:::{name}/bob/*"}]}))
    alice.put_object(Bucket=name, Key="bob/x", Body=b"x")
    got = bob.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "bob/x"}, {"Key": "a"}]})
    assert [d["Key"] for d in got["Deleted"]] == ["bob/x"]
    assert [(e["Key"], e["Code"]) for e in got["Errors"]] == [("a", "AccessDenied")]


def test_expected_bucket_owner(gw, alice, bob, name):
    """x-amz-expected-bucket-owner on any request to a bucket: 403 AccessDenied when the bucket's
    owner is someone else, the request as usual when it names the owner."""
    alice.put_object(Bucket=name, Key="o", Body=b"x")
    calls = [
        lambda owner: alice.get_object(Bucket=name, Key="o", ExpectedBucketOwner=owner),
        lambda owner: alice.head_object(Bucket=name, Key="o", ExpectedBucketOwner=owner),
        lambda owner: alice.put_object(Bucket=name, Key="p", Body=b"y", ExpectedBucketOwner=owner),
        lambda owner: alice.list_objects_v2(Bucket=name, ExpectedBucketOwner=owner),
        lambda owner: alice.get_bucket_versioning(Bucket=name, ExpectedBucketOwner=owner),
        lambda owner: alice.put_object_tagging(Bucket=name, Key="o", ExpectedBucketOwner=owner,
                                               Tagging={"TagSet": [{"Key": "a", "Value": "b"}]}),
        lambda owner: alice.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "p"}]},
                                           ExpectedBucketOwner=owner),
        lambda owner: alice.create_multipart_upload(Bucket=name, Key="m", ExpectedBucketOwner=owner),
    ]
    for call in calls:
        with pytest.raises(ClientError) as e:
            call("bob")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert e.value.response["Error"]["Code"] in ("AccessDenied", "403")  # HEAD: no body
        call("alice")
    r = requests.get(f"{gw.endpoint}/{name}?list-type=2", headers={"x-amz-expected-bucket-owner": "bob"})
    assert (r.status_code, code(r)) == (403, "AccessDenied")
    # a copy: the source's owner is checked against x-amz-source-expected-bucket-owner
    other = f"rt-{uuid.uuid4().hex[:10]}"
    bob.create_bucket(Bucket=other)
    bob.put_bucket_policy(Bucket=other, Policy=json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "alice"}, "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{other}/*"}]}))
    bob.put_object(Bucket=other, Key="src", Body=b"from bob")
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=name, Key="c", CopySource={"Bucket": other, "Key": "src"},
                          ExpectedSourceBucketOwner="alice")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=name, Key="c", CopySource={"Bucket": other, "Key": "src"},
                          ExpectedBucketOwner="bob", ExpectedSourceBucketOwner="bob")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    alice.copy_object(Bucket=name, Key="c", CopySource={"Bucket": other, "Key": "src"},
                      ExpectedBucketOwner="alice", ExpectedSourceBucketOwner="bob")
    assert alice.get_object(Bucket=name, Key="c")["Body"].read() == b"from bob"


def root_tag(r) -> str:
    return ElementTree.fromstring(r.content).tag.rsplit("}", 1)[-1]


def test_each_ambiguous_shape_runs_the_operation_the_table_names(gw, alice, name):
    """Two sub-resources at once, over the wire: what runs is the route the table resolves."""
    alice.put_object(Bucket=name, Key="k", Body=b"x")
    alice.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "bob"}, "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{name}/*"}]}))
    upload = alice.create_multipart_upload(Bucket=name, Key="k")["UploadId"]
    obj, bkt = f"{gw.endpoint}/{name}/k", f"{gw.endpoint}/{name}"
    r = signed("PUT", f"{obj}?partNumber=1&uploadId={upload}&tagging", body=b"part one")  # UploadPart
    assert r.status_code == 200 and r.headers["ETag"] == f'"{hashlib.md5(b"part one").hexdigest()}"'
    r = signed("GET", f"{obj}?uploadId={upload}&tagging")                                   # ListParts
    assert (r.status_code, root_tag(r)) == (200, "ListPartsResult")
    r = signed("POST", f"{obj}?uploads&uploadId={upload}")                                   # CreateMultipartUpload
    assert (r.status_code, root_tag(r)) == (200, "InitiateMultipartUploadResult")
    r = signed("GET", f"{bkt}?versions&policy")                                              # ListObjectVersions
    assert (r.status_code, root_tag(r)) == (200, "ListVersionsResult")
    r = signed("GET", f"{bkt}?versions&uploads")
    assert (r.status_code, root_tag(r)) == (200, "ListVersionsResult")
    r = signed("GET", f"{bkt}?acl&policy")                                                   # GetBucketPolicy
    assert r.status_code == 200 and json.loads(r.content)["Statement"][0]["Action"] == "s3:GetObject"
    tags = b'<Tagging><TagSet><Tag><Key>t</Key><Value>v</Value></Tag></TagSet></Tagging>'
    r = signed("PUT", f"{obj}?tagging&acl", body=tags)                                       # PutObjectTagging
    assert r.status_code == 200, r.text
    assert alice.get_object_tagging(Bucket=name, Key="k")["TagSet"] == [{"Key": "t", "Value": "v"}]
    r = signed("DELETE", f"{obj}?uploadId={upload}&tagging")                                 # AbortMultipartUpload
    assert r.status_code == 204
    assert alice.get_object_tagging(Bucket=name, Key="k")["TagSet"] == [{"Key": "t", "Value": "v"}]
    assert upload not in [u["UploadId"] for u in alice.list_multipart_uploads(Bucket=name).get("Uploads", [])]
    r = signed("GET", f"{bkt}?versions&logging")                                             # not configured
    assert (r.status_code, root_tag(r)) == (200, "BucketLoggingStatus")
    r = signed("PUT", f"{bkt}?policy&logging", body=b"{}")                                   # NotImplemented
    assert (r.status_code, code(r)) == (501, "NotImplemented")

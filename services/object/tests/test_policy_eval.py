"""The bucket policy evaluator alone (no gateway): IAM's semantics of each condition operator,
the set operators and ...IfExists, anonymous and named principals, explicit deny, and the
decision (Allow / Deny / none) a caller combines with ACLs."""
from __future__ import annotations

import json

import pytest

from services.object.gateway import policy, routes
from services.object.gateway.errors import S3Error
from services.object.gateway.policy import ALLOW, DENY, Context

ARN = "arn:aws:s3:::b"


def doc(*statements):
    return {"Version": "2012-10-17", "Statement": list(statements)}


def st(condition=None, effect="Allow", principal="*", action="s3:GetObject", resource=f"{ARN}/*"):
    out = {"Effect": effect, "Principal": principal, "Action": action, "Resource": resource}
    if condition:
        out["Condition"] = condition
    return out


def decide(d, values=None, user="bob", action="s3:GetObject", resource="b/k", lazy=None):
    policy.parse_policy(json.dumps(d).encode(), "b")  # every document here is valid
    return policy.evaluate(d, user=user, action=action, resource=resource, context=Context(values or {}, lazy))


def test_decision_is_allow_deny_or_none_and_deny_wins():
    assert decide(doc(st())) == ALLOW
    assert decide(doc(st(resource=f"{ARN}/other/*"))) is None
    assert decide(doc(st(), st(effect="Deny"))) == DENY
    assert policy.evaluate(None, user="bob", action="s3:GetObject", resource="b/k") is None


def test_principals_anonymous_named_and_not_principal():
    assert decide(doc(st()), user=None) == ALLOW                                   # "*": anyone
    assert decide(doc(st(principal={"AWS": "*"})), user=None) == ALLOW
    assert decide(doc(st(principal={"AWS": "bob"})), user=None) is None             # a name: not anonymous
    assert decide(doc(st(principal={"AWS": "arn:aws:iam::123456789012:user/bob"}))) == ALLOW
    assert decide(doc(st(principal={"CanonicalUser": "bob"}))) == ALLOW
    assert decide(doc(st(principal={"AWS": ["carol"]}))) is None
    not_bob = {"Effect": "Deny", "NotPrincipal": {"AWS": "bob"}, "Action": "s3:*", "Resource": f"{ARN}/*"}
    assert decide(doc(st(), not_bob)) == ALLOW
    assert decide(doc(st(), not_bob), user="carol") == DENY
    assert decide(doc(st(), not_bob), user=None) == DENY
    assert policy.evaluate(doc(st(principal={"AWS": "id-123"})), user="bob", ids=["id-123"],
                           action="s3:GetObject", resource="b/k") == ALLOW


def test_actions_and_resources_wildcards_and_not_forms():
    assert decide(doc(st(action="s3:Get*"))) == ALLOW
    assert decide(doc(st(action="S3:getobject"))) == ALLOW                          # actions ignore case
    assert decide(doc(st(action="s3:Put*"))) is None
    assert decide(doc({"Effect": "Allow", "Principal": "*", "NotAction": "s3:Delete*", "Resource": f"{ARN}/*"})) == ALLOW
    assert decide(doc({"Effect": "Allow", "Principal": "*", "NotAction": "s3:Get*", "Resource": f"{ARN}/*"})) is None
    assert decide(doc(st(resource="arn:aws:s3:::*"))) == ALLOW
    assert decide(doc(st(resource=f"{ARN}/?"))) == ALLOW
    assert decide(doc(st(resource=f"{ARN}/K"))) is None                             # resources keep case
    not_res = {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "NotResource": f"{ARN}/secret/*"}
    assert decide(doc(not_res), resource="b/open") == ALLOW
    assert decide(doc(not_res), resource="b/secret/x") is None


@pytest.mark.parametrize("condition, values, expected", [
    ({"StringEquals": {"s3:prefix": ["a", "b"]}}, {"s3:prefix": "b"}, True),
    ({"StringEquals": {"s3:prefix": "a"}}, {"s3:prefix": "A"}, False),
    ({"StringEqualsIgnoreCase": {"s3:prefix": "a"}}, {"s3:prefix": "A"}, True),
    ({"StringNotEquals": {"s3:prefix": ["a", "b"]}}, {"s3:prefix": "c"}, True),
    ({"StringNotEquals": {"s3:prefix": ["a", "b"]}}, {"s3:prefix": "a"}, False),
    ({"StringNotEquals": {"s3:prefix": "a"}}, {}, True),                   # negated, key absent: true
    ({"StringNotEqualsIgnoreCase": {"s3:prefix": "a"}}, {"s3:prefix": "A"}, False),
    ({"StringLike": {"aws:UserAgent": "*boto*"}}, {"aws:UserAgent": "x boto y"}, True),
    ({"StringNotLike": {"aws:Referer": "https://*.example.com/*"}}, {"aws:Referer": "https://a.example.com/p"}, False),
    ({"StringLike": {"s3:prefix": "a"}}, {}, False),                       # positive, key absent: false
    ({"StringLikeIfExists": {"s3:prefix": "a"}}, {}, True),
    ({"NumericLessThan": {"s3:max-keys": "10"}}, {"s3:max-keys": "9"}, True),
    ({"NumericLessThanEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "10"}, True),
    ({"NumericGreaterThan": {"s3:max-keys": "10"}}, {"s3:max-keys": "10"}, False),
    ({"NumericGreaterThanEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "10.0"}, True),
    ({"NumericEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "ten"}, False),
    ({"NumericNotEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "11"}, True),
    ({"DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}}, {"aws:CurrentTime": "2021-06-01T00:00:00Z"}, True),
    ({"DateLessThan": {"aws:CurrentTime": "2020-01-01"}}, {"aws:CurrentTime": "2019-12-31T23:59:59Z"}, True),
    ({"DateEquals": {"aws:EpochTime": "1577836800"}}, {"aws:EpochTime": "2020-01-01T00:00:00+00:00"}, True),
    ({"DateNotEquals": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}}, {"aws:CurrentTime": "2020-01-01T01:00:00+01:00"},
     False),
    ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:SecureTransport": "false"}, True),
    ({"Bool": {"aws:SecureTransport": True}}, {"aws:SecureTransport": "false"}, False),
    ({"BinaryEquals": {"s3:prefix": "YWJj"}}, {"s3:prefix": "abc"}, True),
    ({"IpAddress": {"aws:SourceIp": ["192.0.2.0/24", "2001:db8::/32"]}}, {"aws:SourceIp": "2001:db8::1"}, True),
    ({"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}}, {"aws:SourceIp": "198.51.100.1"}, False),
    ({"NotIpAddress": {"aws:SourceIp": "192.0.2.0/24"}}, {"aws:SourceIp": "198.51.100.1"}, True),
    ({"ArnLike": {"aws:SourceArn": "arn:aws:s3:::b*"}}, {"aws:SourceArn": "arn:aws:s3:::bucket"}, True),
    ({"ArnEquals": {"aws:SourceArn": "arn:aws:s3:::b"}}, {"aws:SourceArn": "arn:aws:s3:::c"}, False),
    ({"ArnNotLike": {"aws:SourceArn": "arn:aws:s3:::c*"}}, {"aws:SourceArn": "arn:aws:s3:::b"}, True),
    ({"Null": {"s3:x-amz-acl": "true"}}, {}, True),
    ({"Null": {"s3:x-amz-acl": "false"}}, {"s3:x-amz-acl": "private"}, True),
    ({"Null": {"s3:x-amz-acl": "true"}}, {"s3:x-amz-acl": "private"}, False),
    # several keys in one operator and several operators: all must hold
    ({"StringEquals": {"s3:prefix": "a", "s3:delimiter": "/"}}, {"s3:prefix": "a"}, False),
    ({"StringEquals": {"s3:prefix": "a"}, "NumericLessThan": {"s3:max-keys": "5"}}, {"s3:prefix": "a", "s3:max-keys": "4"},
     True),
    # set operators over a multi-valued key
    ({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b"]}}, {"s3:RequestObjectTagKeys": ["a"]}, True),
    ({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b"]}}, {"s3:RequestObjectTagKeys": ["a", "c"]},
     False),
    ({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}, {}, True),
    ({"ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}, {"s3:RequestObjectTagKeys": ["c", "a"]}, True),
    ({"ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}, {}, False),
    ({"ForAnyValue:StringNotEquals": {"s3:RequestObjectTagKeys": ["a"]}}, {"s3:RequestObjectTagKeys": ["a", "b"]}, True),
    ({"ForAllValues:StringLike": {"s3:RequestObjectTagKeys": ["team*"]}}, {"s3:RequestObjectTagKeys": ["team", "teams"]},
     True),
    # policy variables in condition values
    ({"StringLike": {"s3:prefix": "home/${aws:username}/*"}}, {"s3:prefix": "home/bob/x", "aws:username": "bob"}, True),
    ({"StringLike": {"s3:prefix": "home/${aws:username}/*"}}, {"s3:prefix": "home/eve/x", "aws:username": "bob"}, False),
    ({"StringLike": {"s3:prefix": "literal${*}"}}, {"s3:prefix": "literal*"}, True),
    ({"StringLike": {"s3:prefix": "literal${*}"}}, {"s3:prefix": "literalX"}, False),
    # tag keys keep their case; condition key names do not
    ({"StringEquals": {"s3:ExistingObjectTag/Team": "red"}}, {"s3:ExistingObjectTag/Team": "red"}, True),
    ({"StringEquals": {"S3:EXISTINGOBJECTTAG/team": "red"}}, {"s3:ExistingObjectTag/Team": "red"}, False),
    ({"StringEquals": {"AWS:SourceIp": "1.2.3.4"}}, {"aws:sourceip": "1.2.3.4"}, True),
])
def test_condition_operators(condition, values, expected):
    assert (decide(doc(st(condition)), values) == ALLOW) is expected


def test_lazy_keys_are_read_only_when_asked():
    calls = []

    def tag(key):
        calls.append(key)
        return {"team": "red"}.get(key)

    assert decide(doc(st()), lazy={"s3:ExistingObjectTag/": tag}) == ALLOW and calls == []
    d = doc(st({"StringEquals": {"s3:ExistingObjectTag/team": "red"}}))
    assert decide(d, lazy={"s3:ExistingObjectTag/": tag}) == ALLOW and calls == ["team"]


def test_compiled_once_per_document():
    d = doc(st())
    assert policy.compiled(d) is policy.compiled(d)


def test_is_allowed_combines_owner_admin_and_policy():
    deny_all = doc(st(effect="Deny", action="s3:*", resource=[ARN, f"{ARN}/*"]))
    kw = dict(owner="alice", resource="b/k")
    assert policy.is_allowed(deny_all, user="root", admin=True, action="s3:GetObject", **kw)
    assert not policy.is_allowed(deny_all, user="alice", admin=False, action="s3:GetObject", **kw)
    # the owner keeps the policy actions, so a policy cannot lock it out for good
    assert policy.is_allowed(deny_all, user="alice", admin=False, action="s3:DeleteBucketPolicy", **kw)
    assert policy.is_allowed(None, user="alice", admin=False, action="s3:GetObject", **kw)
    assert not policy.is_allowed(None, user="bob", admin=False, action="s3:GetObject", **kw)
    assert policy.is_allowed(doc(st()), user="bob", admin=False, action="s3:GetObject", **kw)


@pytest.mark.parametrize("method, query, has_key, action", [
    ("GET", {}, False, "s3:ListBucket"),
    ("GET", {"versions": ""}, False, "s3:ListBucketVersions"),
    ("PUT", {"cors": ""}, False, "s3:PutBucketCORS"),
    ("DELETE", {"cors": ""}, False, "s3:PutBucketCORS"),
    ("GET", {"tagging": ""}, False, "s3:GetBucketTagging"),
    ("DELETE", {"policy": ""}, False, "s3:DeleteBucketPolicy"),
    ("PUT", {}, False, "s3:CreateBucket"),
    ("GET", {"versionId": "v"}, True, "s3:GetObjectVersion"),
    ("PUT", {"tagging": "", "versionId": "v"}, True, "s3:PutObjectVersionTagging"),
    ("POST", {"uploadId": "u"}, True, "s3:PutObject"),
    ("DELETE", {"uploadId": "u"}, True, "s3:AbortMultipartUpload"),
    ("GET", {"uploadId": "u"}, True, "s3:ListMultipartUploadParts"),
    ("POST", {"restore": ""}, True, "s3:RestoreObject"),
    ("GET", {"acl": ""}, True, "s3:GetObjectAcl"),
])
def test_action_names(method, query, has_key, action):
    route = routes.resolve(routes.OBJECT if has_key else routes.BUCKET, method, query, {})
    assert route.action_for(query) == action


def test_validation_rejects_what_aws_rejects():
    for bad in ({"Statement": [st({"NullIfExists": {"s3:prefix": "true"}})]},
                {"Statement": [st({"Bool": {"aws:SecureTransport": "maybe"}})]},
                {"Statement": [st({"DateLessThan": {"aws:CurrentTime": "yesterday"}})]},
                {"Statement": [dict(st(), NotAction="s3:GetObject")]},
                {"Statement": [st(), st()] and [dict(st(), Sid="a"), dict(st(), Sid="a")]},
                {"Version": "2099-01-01", "Statement": [st()]}):
        with pytest.raises(S3Error) as e:
            policy.parse_policy(json.dumps(bad).encode(), "b")
        assert e.value.code == "MalformedPolicy" and e.value.status == 400

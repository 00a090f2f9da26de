"""Bucket policies: validation on PUT and evaluation per request, with AWS's grammar.

A document is parsed once (:func:`parse_policy` validates, :func:`compiled` caches the
compiled form per stored document), then :func:`evaluate` answers ``ALLOW``, ``DENY`` or
``None`` (no statement applies) for one request: a matching Deny wins over any Allow.
Statements may use ``Principal``/``NotPrincipal``, ``Action``/``NotAction``,
``Resource``/``NotResource`` (``*`` and ``?`` wildcards, policy variables such as
``${aws:username}``) and ``Condition`` with every IAM operator (String*, Numeric*, Date*,
Bool, BinaryEquals, IpAddress/NotIpAddress, Arn*, Null, the ``...IfExists`` forms and the
``ForAnyValue:``/``ForAllValues:`` set operators) over the condition keys a
:class:`Context` supplies (``aws:*`` and ``s3:*`` keys, see :func:`.access.policy_context`).

:func:`evaluate` is the decision of the policy alone, to be combined with the bucket's ACL
by the caller (explicit deny wins, then an Allow or an ACL grant). :func:`is_allowed` is
the combination this gateway applies without ACLs: admin keys may do anything, an explicit
Deny refuses even the owner, the owner may do everything else and anyone else needs an Allow.
"""
from __future__ import annotations

import base64
import calendar
import ipaddress
import json
import re
import time
from functools import lru_cache
from typing import Callable, Iterable

from .errors import S3Error

ALLOW, DENY = "Allow", "Deny"
ARN_PREFIX = "arn:aws:s3:::"
MAX_POLICY_BYTES = 20 * 1024
OWNER_ONLY = {"s3:PutBucketVersioning", "s3:PutLifecycleConfiguration", "s3:PutBucketPolicy",
              "s3:GetBucketPolicy", "s3:DeleteBucketPolicy", "s3:DeleteBucket"}
# actions an owner keeps whatever the policy says (as the AWS account root does), so a policy
# cannot lock its bucket's owner out of changing it
POLICY_ACTIONS = {"s3:PutBucketPolicy", "s3:GetBucketPolicy", "s3:DeleteBucketPolicy"}
STATEMENT_FIELDS = {"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction", "Resource",
                    "NotResource", "Condition"}
VERSIONS = ("2012-10-17", "2008-10-17")

# S3 actions a policy may name (without wildcards), as AWS lists them for bucket policies
S3_ACTIONS = {a.lower() for a in """
AbortMultipartUpload BypassGovernanceRetention CreateBucket DeleteBucket DeleteBucketOwnershipControls
DeleteBucketPolicy DeleteBucketWebsite DeleteObject DeleteObjectTagging DeleteObjectVersion
DeleteObjectVersionTagging GetAccelerateConfiguration GetAnalyticsConfiguration GetBucketAcl GetBucketCORS
GetBucketLocation GetBucketLogging GetBucketNotification GetBucketObjectLockConfiguration
GetBucketOwnershipControls GetBucketPolicy GetBucketPolicyStatus GetBucketPublicAccessBlock
GetBucketRequestPayment GetBucketTagging GetBucketVersioning GetBucketWebsite GetEncryptionConfiguration
GetIntelligentTieringConfiguration GetInventoryConfiguration GetLifecycleConfiguration GetMetricsConfiguration
GetObject GetObjectAcl GetObjectAttributes GetObjectLegalHold GetObjectRetention GetObjectTagging
GetObjectTorrent GetObjectVersion GetObjectVersionAcl GetObjectVersionAttributes GetObjectVersionForReplication
GetObjectVersionTagging GetObjectVersionTorrent GetReplicationConfiguration ListBucket
ListBucketMultipartUploads ListBucketVersions ListMultipartUploadParts ListAllMyBuckets ObjectOwnerOverrideToBucketOwner
PutAccelerateConfiguration PutAnalyticsConfiguration PutBucketAcl PutBucketCORS PutBucketLogging
PutBucketNotification PutBucketObjectLockConfiguration PutBucketOwnershipControls PutBucketPolicy
PutBucketPublicAccessBlock PutBucketRequestPayment PutBucketTagging PutBucketVersioning PutBucketWebsite
PutEncryptionConfiguration PutIntelligentTieringConfiguration PutInventoryConfiguration
PutLifecycleConfiguration PutMetricsConfiguration PutObject PutObjectAcl PutObjectLegalHold
PutObjectRetention PutObjectTagging PutObjectVersionAcl PutObjectVersionTagging PutReplicationConfiguration
ReplicateDelete ReplicateObject ReplicateTags RestoreObject
""".split()}

# condition keys, lower case; a key ending in "/" takes any suffix (tag keys)
AWS_KEYS = {"aws:sourceip", "aws:securetransport", "aws:username", "aws:userid", "aws:currenttime",
            "aws:epochtime", "aws:referer", "aws:useragent", "aws:principaltype", "aws:principalarn",
            "aws:principalaccount", "aws:sourcevpc", "aws:sourcevpce", "aws:sourcearn", "aws:sourceaccount",
            "aws:multifactorauthpresent", "aws:multifactorauthage", "aws:tokenissuetime", "aws:viaawsservice",
            "aws:calledvia", "aws:principalorgid", "aws:principalorgpaths", "aws:requestedregion",
            "aws:principalisawsservice", "aws:principalservicename", "aws:resourceaccount",
            "aws:resourceorgid", "aws:resourceorgpaths", "aws:sourceorgid", "aws:sourceorgpaths",
            "aws:vpcsourceip", "aws:federatedprovider", "aws:principaltag/", "aws:requesttag/",
            "aws:resourcetag/", "aws:tagkeys"}
S3_KEYS = {"s3:prefix", "s3:delimiter", "s3:max-keys", "s3:versionid", "s3:x-amz-acl",
           "s3:x-amz-server-side-encryption", "s3:x-amz-server-side-encryption-aws-kms-key-id",
           "s3:x-amz-server-side-encryption-customer-algorithm", "s3:x-amz-copy-source",
           "s3:x-amz-metadata-directive", "s3:x-amz-storage-class", "s3:x-amz-website-redirect-location",
           "s3:x-amz-content-sha256", "s3:x-amz-grant-read", "s3:x-amz-grant-write", "s3:x-amz-grant-read-acp",
           "s3:x-amz-grant-write-acp", "s3:x-amz-grant-full-control", "s3:existingobjecttag/",
           "s3:requestobjecttag/", "s3:requestobjecttagkeys", "s3:locationconstraint", "s3:signatureversion",
           "s3:signatureage", "s3:authtype", "s3:tlsversion", "s3:object-lock-mode",
           "s3:object-lock-retain-until-date", "s3:object-lock-remaining-retention-days",
           "s3:object-lock-legal-hold", "s3:resourceaccount", "s3:accesspointnetworkorigin",
           "s3:dataaccesspointarn", "s3:dataaccesspointaccount", "s3:objectcreationoperation",
           "s3:x-amz-object-ownership", "s3:x-amz-checksum-algorithm", "s3:if-none-match",
           "s3:if-match", "s3:bucketobjectlockenabled", "s3:bucketownershipcontrols"}

OPERATORS = {"StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase",
             "StringLike", "StringNotLike", "NumericEquals", "NumericNotEquals", "NumericLessThan",
             "NumericLessThanEquals", "NumericGreaterThan", "NumericGreaterThanEquals", "DateEquals",
             "DateNotEquals", "DateLessThan", "DateLessThanEquals", "DateGreaterThan", "DateGreaterThanEquals",
             "Bool", "BinaryEquals", "IpAddress", "NotIpAddress", "ArnEquals", "ArnLike", "ArnNotEquals",
             "ArnNotLike", "Null"}
NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "NumericNotEquals", "DateNotEquals",
           "NotIpAddress", "ArnNotEquals", "ArnNotLike"}
_VARIABLE = re.compile(r"\$\{([^}]*)\}")


def _malformed(message: str) -> S3Error:
    return S3Error("MalformedPolicy", message)


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


@lru_cache(maxsize=4096)
def _wildcard(pattern: str, ignore_case: bool = False) -> re.Pattern:
    """A compiled regex for an IAM pattern (``*`` any run, ``?`` one character)."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body + r"\Z", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _substitute(value: str, ctx: "Context") -> str:
    """Policy variables: ``${aws:username}`` and friends, ``${*}``, ``${?}``, ``${$}``."""
    if "${" not in value:
        return value

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name in ("*", "?", "$"):
            return "\0" + name  # a literal, protected from wildcard expansion below
        got = ctx.get(name)
        return got[0] if got else m.group(0)

    return _VARIABLE.sub(one, value)


def _match(pattern: str, text: str, ignore_case: bool = False) -> bool:
    if "\0" in pattern:  # literal * ? $ from ${*} ${?} ${$}: match piecewise
        parts = re.split(r"(\0.)", pattern)
        rx = "".join(re.escape(p[1]) if p.startswith("\0") else
                     "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in p) for p in parts)
        return re.match(rx + r"\Z", text, re.DOTALL | (re.IGNORECASE if ignore_case else 0)) is not None
    return _wildcard(pattern, ignore_case).match(text) is not None


# -- request context -------------------------------------------------------------------------


class Context:
    """Condition key values of one request (lower-case key names, tag key suffixes kept).

    ``values`` maps keys to a string or a list of strings (absent keys are absent); ``lazy``
    maps a key or a key prefix ending in ``/`` to a function computing the value on first use
    (so the existing object's tags are read only if a policy asks for them)."""

    def __init__(self, values: dict | None = None, lazy: dict[str, Callable] | None = None):
        # keys normalised as they are read (most requests read few of them, or none)
        self.given = values or {}
        self.values: dict[str, list[str] | None] = {}
        self.lazy = {(_norm_key(k)): f for k, f in lazy.items()} if lazy else {}
        self._norm: dict | None = None

    def get(self, key: str) -> list[str] | None:
        key = _norm_key(key)
        if key in self.values:
            return self.values[key]
        if self._norm is None:
            self._norm = {_norm_key(k): v for k, v in self.given.items() if v is not None}
        value = self._norm.get(key)
        if value is None:
            head, slash, tail = key.partition("/")
            fn = self.lazy.get(key) or (self.lazy.get(head + "/") if slash else None)
            if fn is not None:
                value = fn(tail) if slash and key not in self.lazy else fn()
        self.values[key] = None if value is None else [str(x) for x in _as_list(value)]
        return self.values[key]


@lru_cache(maxsize=1024)
def _norm_key(key: str) -> str:
    head, slash, tail = key.partition("/")
    return head.lower() + slash + tail


# -- validation and compilation --------------------------------------------------------------


def _valid_key(key: str) -> bool:
    k = _norm_key(key)
    head, slash, _ = k.partition("/")
    known = AWS_KEYS if k.startswith("aws:") else S3_KEYS if k.startswith("s3:") else None
    if known is None:
        return False
    return (head + "/") in known if slash else k in known


def _parse_date(value: str) -> float | None:
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return calendar.timegm(time.strptime(value, fmt))
        except ValueError:
            continue
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?([+-])(\d\d):?(\d\d)", value)
    if m:
        base = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
        offset = (int(m.group(3)) * 60 + int(m.group(4))) * 60
        return base - offset if m.group(2) == "+" else base + offset
    return None


def _check_condition_values(op: str, key: str, values: list) -> None:
    for v in values:
        if isinstance(v, (dict, list)) or v is None:
            raise _malformed(f"Invalid Condition value for {op}:{key}")
        text = str(v).lower() if isinstance(v, bool) else str(v)
        if op.startswith("Numeric"):
            try:
                float(text)
            except ValueError:
                raise _malformed(f"Invalid numeric value {text!r} for condition {op}") from None
        elif op.startswith("Date") and _parse_date(text) is None:
            raise _malformed(f"Invalid date value {text!r} for condition {op}")
        elif op in ("Bool", "Null") and text.lower() not in ("true", "false"):
            raise _malformed(f"Invalid value {text!r} for condition {op}: must be true or false")
        elif op in ("IpAddress", "NotIpAddress"):
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise _malformed(f"Invalid IP address or CIDR block {text!r} in condition {op}") from None


def _split_operator(name: str) -> tuple[str, str, bool]:
    """(set qualifier or '', base operator, if-exists) of a condition operator name."""
    qualifier = ""
    for q in ("ForAnyValue:", "ForAllValues:"):
        if name.startswith(q):
            qualifier, name = q[:-1], name[len(q):]
    if_exists = name.endswith("IfExists") and name != "IfExists"
    base = name[: -len("IfExists")] if if_exists else name
    if base not in OPERATORS or (if_exists and base == "Null"):
        raise _malformed(f"Invalid Condition type : {name}")
    return qualifier, base, if_exists


def _check_resource(res, bucket: str) -> None:
    if not isinstance(res, str) or not res.startswith(ARN_PREFIX):
        raise _malformed("Policy has invalid resource")
    path = res[len(ARN_PREFIX):]
    if path in ("*", ""):
        if not path:
            raise _malformed("Policy has invalid resource")
        return
    bucket_part = path.split("/", 1)[0]
    if "${" in bucket_part:
        return
    # the pattern must be able to match this bucket or an object in it
    if not (_match(bucket_part, bucket) or (bucket_part.endswith("*") and bucket.startswith(bucket_part[:-1]))
            or _match(path, bucket) or _match(path, bucket + "/x")):
        raise _malformed("Policy has invalid resource")


def _check_principal(principal) -> None:
    if principal == "*":
        return
    if not isinstance(principal, dict) or not principal:
        raise _malformed("Invalid principal in policy")
    for kind, values in principal.items():
        if kind not in ("AWS", "CanonicalUser", "Service", "Federated"):
            raise _malformed("Invalid principal in policy")
        for v in _as_list(values):
            if not isinstance(v, str) or not v:
                raise _malformed("Invalid principal in policy")


def _check_action(action) -> None:
    if not isinstance(action, str) or not action:
        raise _malformed("Policy has invalid action")
    if action == "*":
        return
    service, colon, name = action.partition(":")
    if not colon or service.lower() != "s3":
        raise _malformed("Policy has invalid action")
    if "*" not in name and "?" not in name and name.lower() not in S3_ACTIONS:
        raise _malformed("Policy has invalid action")


def parse_policy(body: bytes, bucket: str) -> dict:
    """Validate a policy document as PutBucketPolicy does; ``MalformedPolicy`` says why."""
    if len(body) > MAX_POLICY_BYTES:
        raise _malformed(f"Policies must not exceed {MAX_POLICY_BYTES} bytes (20 KB)")
    text = body.strip()
    if not text.startswith(b"{"):
        raise _malformed("Policies must be valid JSON and the first byte must be '{'")
    try:
        doc = json.loads(text)
    except ValueError:
        raise _malformed("Policies must be valid JSON and the first byte must be '{'") from None
    for field in doc:
        if field not in ("Version", "Id", "Statement"):
            raise _malformed(f"Unknown field {field}")
    if "Version" in doc and doc["Version"] not in VERSIONS:
        raise _malformed(f"Invalid policy version {doc['Version']!r}: use 2012-10-17")
    if "Statement" not in doc:
        raise _malformed("Missing required field Statement")
    statements = _as_list(doc["Statement"])
    if not statements:
        raise _malformed("Missing required field Statement")
    sids = set()
    for st in statements:
        if not isinstance(st, dict):
            raise _malformed("Statement must be a JSON object")
        for field in st:
            if field not in STATEMENT_FIELDS:
                raise _malformed(f"Unknown field {field}")
        if "Sid" in st:
            if not isinstance(st["Sid"], str):
                raise _malformed("Statement Sid must be a string")
            if st["Sid"] and st["Sid"] in sids:
                raise _malformed(f"Statement IDs (SID) must be unique: {st['Sid']}")
            sids.add(st["Sid"])
        if "Effect" not in st:
            raise _malformed("Missing required field Effect")
        if st["Effect"] not in (ALLOW, DENY):
            raise _malformed(f"Invalid effect: {st['Effect']}")
        for a, b, what in (("Principal", "NotPrincipal", "Principal"), ("Action", "NotAction", "Action"),
                           ("Resource", "NotResource", "Resource")):
            if a in st and b in st:
                raise _malformed(f"Statement cannot have both {a} and {b}")
            if a not in st and b not in st:
                raise _malformed(f"Missing required field {what}")
        _check_principal(st.get("Principal", st.get("NotPrincipal")))
        for action in _as_list(st.get("Action", st.get("NotAction"))):
            _check_action(action)
        resources = _as_list(st.get("Resource", st.get("NotResource")))
        if not resources:
            raise _malformed("Missing required field Resource")
        for res in resources:
            _check_resource(res, bucket)
        cond = st.get("Condition")
        if cond is not None:
            if not isinstance(cond, dict):
                raise _malformed("Condition must be a JSON object")
            for op_name, block in cond.items():
                _, base, _ = _split_operator(op_name)
                if not isinstance(block, dict) or not block:
                    raise _malformed(f"Invalid Condition block for {op_name}")
                for key, values in block.items():
                    if not _valid_key(key):
                        raise _malformed("Policy has an invalid condition key")
                    values = _as_list(values)
                    if not values:
                        raise _malformed(f"Condition {op_name}:{key} has no value")
                    _check_condition_values(base, key, values)
    return doc


class _Statement:
    """One statement, compiled."""

    def __init__(self, st: dict):
        self.effect = st["Effect"]
        self.not_principal = "NotPrincipal" in st
        self.principal = _principal_ids(st.get("Principal", st.get("NotPrincipal")))
        self.not_action = "NotAction" in st
        self.actions = [_wildcard(str(a), True) for a in _as_list(st.get("Action", st.get("NotAction")))]
        self.not_resource = "NotResource" in st
        # patterns without policy variables are compiled now; the others per request
        self.resources = [str(r) if "${" in str(r) else _wildcard(str(r))
                          for r in _as_list(st.get("Resource", st.get("NotResource")))]
        self.conditions = []
        for op_name, block in (st.get("Condition") or {}).items():
            qualifier, base, if_exists = _split_operator(op_name)
            for key, values in block.items():
                vals = [str(v).lower() if isinstance(v, bool) else str(v) for v in _as_list(values)]
                self.conditions.append((qualifier, base, if_exists, key, vals))

    def names(self, user: str | None, ids: Iterable[str], actions: Iterable[str]) -> bool:
        """Whether the statement's principal and actions cover ``user`` doing one of ``actions``."""
        hit = any(rx.match(action) is not None for rx in self.actions for action in actions)
        return hit != self.not_action and _principal_hit(self.principal, user, ids) != self.not_principal

    def applies(self, user: str | None, ids: Iterable[str], action: str, arn: str, ctx: Context) -> bool:
        hit = False  # the action first: it rules most statements out, and costs least
        for rx in self.actions:
            if rx.match(action) is not None:
                hit = True
                break
        if hit == self.not_action:
            return False
        if _principal_hit(self.principal, user, ids) == self.not_principal:
            return False
        hit = any(_match(_substitute(r, ctx), arn) if isinstance(r, str) else r.match(arn) is not None
                  for r in self.resources)
        if hit == self.not_resource:
            return False
        return all(_condition(q, op, ie, key, vals, ctx) for q, op, ie, key, vals in self.conditions)


def _principal_ids(principal) -> set[str] | None:
    """None for everyone ("*"), else the names the principal lists (every form)."""
    if principal == "*":
        return None
    out = set()
    for kind, values in principal.items():
        for v in _as_list(values):
            if v == "*":
                return None
            out.add(str(v))
    return out


def _principal_hit(principal: set[str] | None, user: str | None, ids: Iterable[str]) -> bool:
    if principal is None:
        return True
    if user is None:  # anonymous: only "*"
        return False
    names = {user, *ids}
    for value in principal:
        if value in names:
            return True
        tail = value.rsplit("/", 1)[-1] if "/" in value else value.rsplit(":", 1)[-1]
        if tail in names:
            return True
    return False


# -- condition operators ---------------------------------------------------------------------


def _num(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


@lru_cache(maxsize=1024)
def _network(text: str):
    return ipaddress.ip_network(text, strict=False)


@lru_cache(maxsize=1024)
def _address(text: str):
    return ipaddress.ip_address(text)


def _ip_in(value: str, network: str) -> bool:
    try:
        return _address(value) in _network(network)
    except ValueError:
        return False


def _positive(op: str, have: str, want: str) -> bool:
    """Whether one context value satisfies one policy value under the positive form of ``op``."""
    if op in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals"):
        return have == want.replace("\0", "")
    if op in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return have.lower() == want.replace("\0", "").lower()
    if op in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike"):
        return _match(want, have)
    if op.startswith("Numeric"):
        a, b = _num(have), _num(want)
        if a is None or b is None:
            return False
        return _compare(op[len("Numeric"):], a, b)
    if op.startswith("Date"):
        a, b = _parse_date(have), _parse_date(want)
        if a is None or b is None:
            return False
        return _compare(op[len("Date"):], a, b)
    if op == "Bool":
        return have.lower() == want.lower()
    if op == "BinaryEquals":
        try:
            return base64.b64decode(want) == have.encode()
        except ValueError:
            return False
    if op in ("IpAddress", "NotIpAddress"):
        return _ip_in(have, want)
    return False


def _compare(kind: str, a: float, b: float) -> bool:
    return {"Equals": a == b, "NotEquals": a == b, "LessThan": a < b, "LessThanEquals": a <= b,
            "GreaterThan": a > b, "GreaterThanEquals": a >= b}[kind]


def _condition(qualifier: str, op: str, if_exists: bool, key: str, wanted: list[str], ctx: Context) -> bool:
    have = ctx.get(key)
    if op == "Null":
        absent = not have
        return any((w.lower() == "true") == absent for w in wanted)
    negated = op in NEGATED
    wanted = [_substitute(w, ctx) for w in wanted]
    if not have:
        if qualifier == "ForAllValues":
            return True
        if qualifier == "ForAnyValue":
            return False
        return if_exists or negated

    def value_ok(h: str) -> bool:
        hit = any(_positive(op, h, w) for w in wanted)
        return not hit if negated else hit

    if qualifier == "ForAllValues":
        return all(value_ok(h) for h in have)
    if qualifier == "ForAnyValue":
        return any(value_ok(h) for h in have)
    if negated:  # single-valued key: none of the listed values may match
        return all(value_ok(h) for h in have)
    return any(value_ok(h) for h in have)


# -- evaluation ------------------------------------------------------------------------------

_cache: dict[int, tuple[dict, list[_Statement]]] = {}


def compiled(policy: dict) -> list[_Statement]:
    """The compiled statements of a stored policy document (compiled once per document)."""
    hit = _cache.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    statements = [_Statement(st) for st in _as_list(policy.get("Statement", []))]
    if len(_cache) > 1024:
        _cache.clear()
    _cache[id(policy)] = (policy, statements)
    return statements


def evaluate(policy: dict | None, *, user: str | None, action: str, resource: str,
             context: Context | None = None, ids: Iterable[str] = ()) -> str | None:
    """The policy's decision for ``user`` (None: anonymous; ``ids``: other names the requester
    goes by, e.g. its canonical id) doing ``action`` on ``resource`` ("bucket" or "bucket/key"):
    ``DENY`` if a Deny statement applies, else ``ALLOW`` if an Allow applies, else None."""
    if not policy:
        return None
    ctx = context or Context()
    arn = ARN_PREFIX + resource
    decision = None
    for st in compiled(policy):
        if st.applies(user, ids, action, arn, ctx):
            if st.effect == DENY:
                return DENY
            decision = ALLOW
    return decision


def may_allow(policy: dict, *, user: str | None, actions: Iterable[str], ids: Iterable[str] = ()) -> bool:
    """Whether an Allow statement of ``policy`` names ``user`` and one of ``actions``, whatever
    its resources and conditions (a pre-check that never refuses what :func:`evaluate` allows)."""
    for st in compiled(policy):
        if st.effect == ALLOW and st.names(user, ids, actions):
            return True
    return False


def is_allowed(policy: dict | None, *, user: str | None, admin: bool, owner: str, action: str, resource: str,
               context: Context | None = None) -> bool:
    """Whether ``user`` (None: anonymous) may do ``action`` on ``resource`` without ACLs: admin
    keys always; an explicit Deny refuses (the owner keeps the policy actions); then the owner,
    or an Allow."""
    if admin:
        return True
    if user == owner and action in POLICY_ACTIONS:
        return True
    decision = evaluate(policy, user=user, action=action, resource=resource, context=context)
    if decision == DENY:
        return False
    if user == owner:
        return True
    if action in OWNER_ONLY:
        return False
    return decision == ALLOW

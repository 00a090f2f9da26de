"""Access control lists: canned ACLs, ``x-amz-grant-*`` headers, AccessControlPolicy XML.

An ACL is stored as a list of grants ``[kind, grantee, permission]``: kind ``"id"`` (a user,
by the ID S3 shows: the Strata user name) or ``"uri"`` (a group). A bucket's is its setting
``acl``; an object version's is its metadata ``acl`` (absent: only its owner has
FULL_CONTROL) and its owner the metadata ``ow`` (absent: the bucket owner). E-mail grantees
are resolved to the user with that ``email`` in the gateway config, as S3 does on PUT.

Who may do what with these grants is decided in :mod:`.access`.
"""
from __future__ import annotations

from xml.sax.saxutils import escape

from .errors import ERROR_CODES, S3Error, parse_xml, xml_doc

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
GROUPS = (ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY)
PUBLIC_GROUPS = (ALL_USERS, AUTHENTICATED_USERS)
PERMISSIONS = ("FULL_CONTROL", "WRITE", "WRITE_ACP", "READ", "READ_ACP")
# S3's canonical ID for objects written by unsigned requests
ANONYMOUS_ID = "65a011a29cdf8ec533ec3d1ccaae921c"
CANNED = ("private", "public-read", "public-read-write", "authenticated-read", "bucket-owner-read",
          "bucket-owner-full-control", "log-delivery-write", "aws-exec-read")
GRANT_HEADERS = {"x-amz-grant-read": "READ", "x-amz-grant-write": "WRITE", "x-amz-grant-read-acp": "READ_ACP",
                 "x-amz-grant-write-acp": "WRITE_ACP", "x-amz-grant-full-control": "FULL_CONTROL"}
MAX_GRANTS = 100
XSI = "http://www.w3.org/2001/XMLSchema-instance"

ERROR_CODES.update({
    "MalformedACLError": (400, "The XML you provided was not well-formed or did not validate against our "
                               "published schema"),
    "UnresolvableGrantByEmailAddress": (400, "The email address you provided does not match any account on record."),
    "AccessControlListNotSupported": (400, "The bucket does not allow ACLs"),
    "InvalidBucketAclWithObjectOwnership": (400, "Bucket cannot have ACLs set with ObjectOwnership's "
                                                 "BucketOwnerEnforced setting"),
    "UnexpectedContent": (400, "This request does not support content"),
})


class Users:
    """The IDs and e-mail addresses grants may name (from the gateway config's users)."""

    def __init__(self, users: dict):
        self.ids = {u.get("user") or ak for ak, u in users.items()}
        self.emails = {u["email"].lower(): (u.get("user") or ak) for ak, u in users.items() if u.get("email")}

    def check_id(self, user_id: str, owners: tuple = ()) -> str:
        if user_id in self.ids or user_id in owners or user_id == ANONYMOUS_ID:
            return user_id
        raise S3Error("InvalidArgument", "Invalid id", ArgumentName="CanonicalUser/ID", ArgumentValue=user_id)

    def by_email(self, email: str) -> str:
        user_id = self.emails.get(email.strip().lower())
        if user_id is None:
            raise S3Error("UnresolvableGrantByEmailAddress", EmailAddress=email)
        return user_id


def owner_only(owner: str) -> list:
    """The default ACL: the owner has FULL_CONTROL."""
    return [["id", owner, "FULL_CONTROL"]]


def canned(name: str, owner: str, bucket_owner: str, for_object: bool) -> list:
    """Grants of canned ACL ``name`` for a resource owned by ``owner``."""
    if name not in CANNED:
        raise S3Error("InvalidArgument", f"Invalid canned ACL {name!r}", ArgumentName="x-amz-acl", ArgumentValue=name)
    grants = owner_only(owner)
    if name in ("public-read", "public-read-write"):
        grants.append(["uri", ALL_USERS, "READ"])
    if name == "public-read-write":
        grants.append(["uri", ALL_USERS, "WRITE"])
    if name == "authenticated-read":
        grants.append(["uri", AUTHENTICATED_USERS, "READ"])
    if name == "log-delivery-write" and not for_object:
        grants += [["uri", LOG_DELIVERY, "WRITE"], ["uri", LOG_DELIVERY, "READ_ACP"]]
    if for_object and bucket_owner != owner and name in ("bucket-owner-read", "bucket-owner-full-control"):
        grants.append(["id", bucket_owner, "READ" if name == "bucket-owner-read" else "FULL_CONTROL"])
    return grants


def _grantee(kind: str, value: str, users: Users, owners: tuple) -> list:
    kind = kind.strip().lower()
    value = value.strip().strip('"')
    if kind == "id":
        return ["id", users.check_id(value, owners)]
    if kind in ("emailaddress", "email"):
        return ["id", users.by_email(value)]
    if kind == "uri":
        if value not in GROUPS:
            raise S3Error("InvalidArgument", "Invalid group uri", ArgumentName="uri", ArgumentValue=value)
        return ["uri", value]
    raise S3Error("InvalidArgument", f"Invalid grantee type {kind!r}: use id, emailAddress or uri",
                  ArgumentName="x-amz-grant", ArgumentValue=value)


def from_grant_headers(headers: dict[str, str], users: Users, owners: tuple = ()) -> list | None:
    """Grants named by ``x-amz-grant-*`` headers (None when there are none)."""
    grants = []
    found = False
    for header, perm in GRANT_HEADERS.items():
        value = headers.get(header)
        if value is None:
            continue
        found = True
        for item in value.split(","):
            if not item.strip():
                continue
            kind, sep, who = item.partition("=")
            if not sep:
                raise S3Error("InvalidArgument", f"Invalid grant {item.strip()!r}: expected type=\"value\"",
                              ArgumentName=header, ArgumentValue=value)
            grants.append(_grantee(kind, who, users, owners) + [perm])
    if len(grants) > MAX_GRANTS:
        raise S3Error("MalformedACLError", f"An ACL may hold at most {MAX_GRANTS} grants")
    return grants if found else None


def from_request(headers: dict[str, str], users: Users, owner: str, bucket_owner: str,
                 for_object: bool) -> list | None:
    """The ACL a write request asks for (x-amz-acl or x-amz-grant-*), None if neither."""
    grants = from_grant_headers(headers, users, (owner, bucket_owner))
    name = headers.get("x-amz-acl")
    if name is not None and grants is not None:
        raise S3Error("InvalidRequest", "Specifying both Canned ACLs and Header Grants is not allowed")
    if name is not None:
        return canned(name.strip(), owner, bucket_owner, for_object)
    return grants


def parse_policy_xml(body: bytes, users: Users, owners: tuple) -> tuple[str, list]:
    """(owner ID, grants) of an AccessControlPolicy document; MalformedACLError if it is not one."""
    try:
        root = parse_xml(body)
    except S3Error:
        raise S3Error("MalformedACLError") from None
    if root.tag != "AccessControlPolicy":
        raise S3Error("MalformedACLError", "The root element must be AccessControlPolicy")
    owner_id = root.findtext("Owner/ID")
    if not owner_id:
        raise S3Error("MalformedACLError", "The ACL must name its Owner's ID")
    acl = root.find("AccessControlList")
    grants = []
    for grant in (acl.findall("Grant") if acl is not None else []):
        grantee = grant.find("Grantee")
        perm = (grant.findtext("Permission") or "").strip()
        if grantee is None or perm not in PERMISSIONS:
            raise S3Error("MalformedACLError", "Every Grant needs a Grantee and a Permission among "
                          + ", ".join(PERMISSIONS))
        kind = next((v for k, v in grantee.attrib.items() if k == f"{{{XSI}}}type" or k.endswith("type")), None)
        fields = {"CanonicalUser": ("id", "ID"), "AmazonCustomerByEmail": ("emailAddress", "EmailAddress"),
                  "Group": ("uri", "URI")}
        if kind not in fields:
            raise S3Error("MalformedACLError", "Every Grantee needs an xsi:type of CanonicalUser, "
                          "AmazonCustomerByEmail or Group")
        name, child = fields[kind]
        value = grantee.findtext(child)
        if not value:
            raise S3Error("MalformedACLError", f"A {kind} grantee needs {child}")
        grants.append(_grantee(name, value, users, owners) + [perm])
    if len(grants) > MAX_GRANTS:
        raise S3Error("MalformedACLError", f"An ACL may hold at most {MAX_GRANTS} grants")
    return owner_id.strip(), grants


def owner_xml(user_id: str) -> str:
    """An <Owner> element (ID and DisplayName are both the Strata user name)."""
    e = escape(user_id)
    return f"<Owner><ID>{e}</ID><DisplayName>{e}</DisplayName></Owner>"


def to_xml(owner: str, grants: list) -> bytes:
    """The AccessControlPolicy document S3 answers to GET ?acl: group grants first, then
    grants to users (AWS documents no order; radosgw answers so, and S3 conformance suites
    compare mixed lists in that order)."""
    parts = []
    for kind, who, perm in sorted(grants, key=lambda grant: grant[0] == "id"):
        if kind == "id":
            grantee = (f'<Grantee xmlns:xsi="{XSI}" xsi:type="CanonicalUser"><ID>{escape(who)}</ID>'
                       f"<DisplayName>{escape(who)}</DisplayName></Grantee>")
        else:
            grantee = f'<Grantee xmlns:xsi="{XSI}" xsi:type="Group"><URI>{escape(who)}</URI></Grantee>'
        parts.append(f"<Grant>{grantee}<Permission>{perm}</Permission></Grant>")
    return xml_doc("AccessControlPolicy", owner_xml(owner) + "<AccessControlList>" + "".join(parts)
                   + "</AccessControlList>")


def canned_name(grants: list | None, owner: str) -> str:
    """The canned ACL a bucket's grants amount to, or 'custom'."""
    if grants is None:
        return "private"
    for name in ("private", "public-read", "public-read-write", "authenticated-read"):
        if sorted(canned(name, owner, owner, False)) == sorted(grants):
            return name
    return "custom"


def is_public(grants: list | None) -> bool:
    """Whether the ACL grants anything to everyone or to every signed-in user."""
    return any(kind == "uri" and who in PUBLIC_GROUPS for kind, who, _ in grants or ())


def granted(grants: list, user: str, permission: str, ignore_public: bool = False) -> bool:
    """Whether ``grants`` give ``user`` ('' when anonymous) ``permission`` (FULL_CONTROL counts)."""
    for kind, who, perm in grants:
        if perm != permission and perm != "FULL_CONTROL":
            continue
        if kind == "id":
            if user and who == user:
                return True
        elif who == ALL_USERS or (who == AUTHENTICATED_USERS and user):
            if not ignore_public:
                return True
    return False


def only_owner_full_control(grants: list, bucket_owner: str) -> bool:
    """Whether ``grants`` amount to 'the bucket owner has FULL_CONTROL' and nothing else (what a
    bucket with ACLs disabled still accepts)."""
    return all(kind == "id" and who == bucket_owner and perm == "FULL_CONTROL" for kind, who, perm in grants)

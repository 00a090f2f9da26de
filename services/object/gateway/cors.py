"""Bucket CORS: Put/Get/DeleteBucketCors, preflight ``OPTIONS`` and the CORS headers of
actual responses, with S3's rules.

A configuration is up to 100 ``CORSRule`` elements (``AllowedOrigin`` and ``AllowedMethod``
required, ``AllowedHeader``, ``ExposeHeader``, ``MaxAgeSeconds``, ``ID`` optional; one ``*``
at most per origin or header pattern). The first rule that matches the request's origin,
method (for a preflight, ``Access-Control-Request-Method``) and requested headers answers;
a preflight that no rule matches gets 403 ``CORSResponse``. Actual requests carrying an
``Origin`` get the matching rule's headers whatever their outcome (errors and presigned
requests too) plus ``Vary: Origin``; requests without ``Origin`` cost nothing here.
"""
from __future__ import annotations

import re

from .errors import S3Error, child_text, el, parse_xml, xml_doc
from .request import Request, Response, xml_response

METHODS = ("GET", "PUT", "HEAD", "POST", "DELETE")
MAX_RULES = 100
MAX_CONFIG_BYTES = 64 * 1024
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"


FIELDS = {"ID", "AllowedOrigins", "AllowedMethods", "AllowedHeaders", "ExposeHeaders", "MaxAgeSeconds"}


def check_rules(rules) -> list[dict]:
    """Validate rules shaped as S3's JSON (``AllowedOrigins``, ``AllowedMethods``, optional
    ``AllowedHeaders``, ``ExposeHeaders``, ``MaxAgeSeconds``, ``ID``), as PutBucketCors does;
    the rules, normalised (every list present)."""
    if not isinstance(rules, list) or not 1 <= len(rules) <= MAX_RULES:
        raise S3Error("MalformedXML", f"A CORS configuration has between 1 and {MAX_RULES} CORSRule elements")
    out = []
    for rule in rules:
        if not isinstance(rule, dict) or set(rule) - FIELDS:
            raise S3Error("MalformedXML", f"A CORSRule has only the fields {', '.join(sorted(FIELDS))}")
        lists = {}
        for name in ("AllowedOrigins", "AllowedMethods", "AllowedHeaders", "ExposeHeaders"):
            value = rule.get(name, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise S3Error("MalformedXML", f"{name} must be a list of strings")
            lists[name] = [v.strip() for v in value]
        if not lists["AllowedOrigins"] or not lists["AllowedMethods"]:
            raise S3Error("MalformedXML", "Every CORSRule needs AllowedOrigin and AllowedMethod")
        for m in lists["AllowedMethods"]:
            if m not in METHODS:
                raise S3Error("InvalidRequest", f"Found unsupported HTTP method in CORS config. Unsupported method is {m}")
        for o in lists["AllowedOrigins"]:
            if o.count("*") > 1:
                raise S3Error("InvalidRequest", f'AllowedOrigin "{o}" can not have more than one wildcard.')
        for h in lists["AllowedHeaders"]:
            if h.count("*") > 1:
                raise S3Error("InvalidRequest", f'AllowedHeader "{h}" can not have more than one wildcard.')
        if "ID" in rule:
            if not isinstance(rule["ID"], str) or len(rule["ID"]) > 255:
                raise S3Error("InvalidArgument", "A CORS rule ID is a string of at most 255 characters")
            lists["ID"] = rule["ID"]
        if "MaxAgeSeconds" in rule:
            age = rule["MaxAgeSeconds"]
            if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age < 2 ** 31:
                raise S3Error("MalformedXML", "MaxAgeSeconds must be a non-negative integer")
            lists["MaxAgeSeconds"] = age
        out.append(lists)
    return out


def parse_cors(body: bytes) -> list[dict]:
    """Rules of a CORSConfiguration document (``MalformedXML`` / ``InvalidRequest`` as S3)."""
    root = parse_xml(body)
    if root.tag != "CORSConfiguration":
        raise S3Error("MalformedXML")
    rules = []
    for node in root.findall("CORSRule"):
        rule = {name + "s": [(n.text or "").strip() for n in node.findall(name)]
                for name in ("AllowedOrigin", "AllowedMethod", "AllowedHeader", "ExposeHeader")}
        rid = child_text(node, "ID")
        if rid is not None:
            rule["ID"] = rid
        age = child_text(node, "MaxAgeSeconds")
        if age is not None:
            try:
                rule["MaxAgeSeconds"] = int(age)
            except ValueError:
                raise S3Error("MalformedXML", "MaxAgeSeconds must be an integer") from None
        rules.append(rule)
    return check_rules(rules)


def render(rules: list[dict]) -> bytes:
    """The GetBucketCors document of stored rules."""
    out = []
    for r in rules:
        parts = [el("ID", r["ID"])] if "ID" in r else []
        parts += [el("AllowedHeader", h) for h in r["AllowedHeaders"]]
        parts += [el("AllowedMethod", m) for m in r["AllowedMethods"]]
        parts += [el("AllowedOrigin", o) for o in r["AllowedOrigins"]]
        parts += [el("ExposeHeader", e) for e in r["ExposeHeaders"]]
        if "MaxAgeSeconds" in r:
            parts.append(el("MaxAgeSeconds", r["MaxAgeSeconds"]))
        out.append("<CORSRule>" + "".join(parts) + "</CORSRule>")
    return xml_doc("CORSConfiguration", "".join(out))


def _pattern(value: str, ignore_case: bool) -> re.Pattern:
    body = ".*".join(re.escape(p) for p in value.split("*"))
    return re.compile(body + r"\Z", re.IGNORECASE if ignore_case else 0)


def _origin_ok(rule: dict, origin: str) -> bool:
    return any(o == "*" or _pattern(o, False).match(origin) for o in rule["AllowedOrigins"])


def _headers_ok(rule: dict, wanted: list[str]) -> bool:
    return all(any(_pattern(h, True).match(w) for h in rule["AllowedHeaders"]) for w in wanted)


def match(rules: list[dict], origin: str, method: str, headers: list[str] = ()) -> dict | None:
    """The first rule allowing ``origin`` to use ``method`` with request ``headers``."""
    for rule in rules:
        if method in rule["AllowedMethods"] and _origin_ok(rule, origin) and _headers_ok(rule, list(headers)):
            return rule
    return None


def _allow_headers(rule: dict, origin: str) -> dict[str, str]:
    wildcard = rule["AllowedOrigins"] == ["*"]
    h = {"access-control-allow-origin": "*" if wildcard else origin,
         "access-control-allow-methods": ", ".join(rule["AllowedMethods"]), "vary": VARY}
    if not wildcard:
        h["access-control-allow-credentials"] = "true"
    if rule["ExposeHeaders"]:
        h["access-control-expose-headers"] = ", ".join(rule["ExposeHeaders"])
    if "MaxAgeSeconds" in rule:
        h["access-control-max-age"] = str(rule["MaxAgeSeconds"])
    return h


def preflight(bucket, req: Request) -> Response:
    """An ``OPTIONS`` request (unsigned, as browsers send it), answered by the bucket's rules."""
    origin = req.headers.get("origin")
    if not origin:
        raise S3Error("BadRequest", "Insufficient information. Origin request header needed.")
    method = req.headers.get("access-control-request-method")
    if method not in METHODS:
        raise S3Error("BadRequest", f"Invalid Access-Control-Request-Method: {method or 'null'}")
    cors = bucket.settings.get("cors")
    if not cors:
        raise S3Error("CORSResponse", "CORS is not enabled for this bucket.", resource="BUCKET")
    wanted = [h.strip() for h in req.headers.get("access-control-request-headers", "").split(",") if h.strip()]
    rule = match(cors, origin, method, wanted)
    if rule is None:
        raise S3Error("CORSResponse", "This CORS request is not allowed. This is usually because the evalution of "
                      "Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers "
                      "are not whitelisted by the resource's CORS spec.", resource="OBJECT" if req.key else "BUCKET")
    headers = _allow_headers(rule, origin)
    if wanted:
        headers["access-control-allow-headers"] = ", ".join(wanted)
    return Response(200, headers)


def decorate(bucket, req: Request, resp: Response) -> None:
    """Add the CORS headers of the rule matching an actual request's Origin and method."""
    origin = req.headers.get("origin")
    cors = bucket.settings.get("cors") if bucket is not None else None
    if not origin or not cors:
        return
    rule = match(cors, origin, req.method)
    if rule is None:
        return
    headers = _allow_headers(rule, origin)
    headers["vary"] = "Origin"
    for name, value in headers.items():
        resp.headers.setdefault(name, value)


async def put_cors(gw, req: Request, bucket) -> Response:
    """PutBucketCors."""
    rules = parse_cors(await req.body().read_all(MAX_CONFIG_BYTES))
    await gw.run(bucket.set_setting, "cors", rules)
    return Response(200)


async def get_cors(gw, req: Request, bucket) -> Response:
    """GetBucketCors (``NoSuchCORSConfiguration`` when none is set)."""
    rules = bucket.settings.get("cors")
    if not rules:
        raise S3Error("NoSuchCORSConfiguration", BucketName=bucket.name)
    return xml_response(render(rules))


async def delete_cors(gw, req: Request, bucket) -> Response:
    """DeleteBucketCors."""
    await gw.run(bucket.set_setting, "cors", None)
    return Response(204)

"""S3 errors and the XML helpers that render gateway responses.

Every failure inside the gateway is raised as :class:`S3Error` with an S3 error code; the
ASGI app turns it into the XML body and HTTP status that S3 clients expect.
"""
from __future__ import annotations

from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"

# code -> (HTTP status, default message), as documented by AWS.
ERROR_CODES: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied"),
    "BadRequest": (400, "Bad Request"),
    "CORSResponse": (403, "This CORS request is not allowed."),
    "ConditionalRequestConflict": (409, "A conflicting operation occurred. If using PutObject you can retry the request. If using multipart upload you should initiate another CreateMultipartUpload request and re-upload each part."),
    "BadDigest": (400, "The Content-MD5 or checksum you specified did not match what we received."),
    "BucketAlreadyExists": (409, "The requested bucket name is not available."),
    "BucketAlreadyOwnedByYou": (409, "Your previous request to create the named bucket succeeded and you already own it."),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty"),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed object size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the Content-Length HTTP header."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (403, "The AWS Access Key Id you provided does not exist in our records."),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidBucketState": (409, "The request is not valid with the current state of the bucket."),
    "InvalidDigest": (400, "The Content-MD5 you specified is not valid."),
    "InvalidLocationConstraint": (400, "The specified location constraint is not valid."),
    "InvalidObjectState": (403, "The operation is not valid for the object's storage class"),
    "InvalidPart": (400, "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order. Parts must be ordered by part number."),
    "InvalidPartNumber": (416, "The requested partnumber is not satisfiable"),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidStorageClass": (400, "The storage class you specified is not valid"),
    "KeyTooLongError": (400, "Your key is too long"),
    "MalformedPolicy": (400, "Policies must be valid JSON and the first byte must be '{'"),
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate against our published schema."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "MissingSecurityHeader": (400, "Your request is missing a required header."),
    "NoSuchBucket": (404, "The specified bucket does not exist"),
    "OperationAborted": (409, "A conflicting conditional operation is currently in progress against this resource. Try again."),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchUpload": (404, "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."),
    "NoSuchVersion": (404, "The specified version does not exist."),
    "NoSuchTagSet": (404, "The TagSet does not exist"),
    "NoSuchSnapshot": (404, "The bucket has no snapshot of that name"),
    "SnapshotAlreadyExists": (409, "The bucket already has a snapshot of that name"),
    "NoSuchLifecycleConfiguration": (404, "The lifecycle configuration does not exist"),
    "NoSuchCORSConfiguration": (404, "The CORS configuration does not exist"),
    "NoSuchWebsiteConfiguration": (404, "The specified bucket does not have a website configuration"),
    "ReplicationConfigurationNotFoundError": (404, "The replication configuration was not found"),
    "NoSuchBucketPolicy": (404, "The bucket policy does not exist"),
    "NotImplemented": (501, "A header you provided implies functionality that is not implemented"),
    "PreconditionFailed": (412, "At least one of the pre-conditions you specified did not hold"),
    "QuotaExceeded": (403, "The bucket quota (bytes or objects) would be exceeded by this request."),
    "RestoreAlreadyInProgress": (409, "Object restore is already in progress"),
    "RequestTimeTooSkewed": (403, "The difference between the request time and the current time is too large."),
    "SignatureDoesNotMatch": (403, "The request signature we calculated does not match the signature you provided. Check your key and signing method."),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (400, "Error parsing the X-Amz-Credential parameter."),
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does not match what was computed."),
    "InvalidTag": (400, "The tag provided was not a valid tag."),
    "NotModified": (304, "Not Modified"),
    "ServiceUnavailable": (503, "Please reduce your request rate."),
    "SlowDown": (503, "Please reduce your request rate."),
    "RequestTimeout": (400, "Your socket connection to the server was not read from or written to within the timeout period. Idle connections will be closed."),
    "RequestHeaderSectionTooLarge": (400, "Your request header section exceeds the maximum allowed size."),
    # not an AWS code (AWS never fills up): 507 as WebDAV defines it and MinIO answers a full
    # disk; botocore does not retry it, so the client sees the reason at once
    "InsufficientStorage": (507, "The pool holding this bucket is full; delete objects or grow the pool, then retry."),
}


class S3Error(Exception):
    """An S3 API error: ``code`` picks the HTTP status; ``message`` says what to fix."""

    def __init__(self, code: str, message: str | None = None, *, resource: str = "",
                 headers: dict[str, str] | None = None, **extra: str):
        status, default = ERROR_CODES.get(code, (400, code))
        super().__init__(message or default)
        self.code = code
        self.status = status
        self.message = message or default
        self.resource = resource
        self.headers = headers or {}
        self.extra = extra

    def to_xml(self, request_id: str) -> bytes:
        """The S3 ``<Error>`` document for this error."""
        parts = [f"<Code>{self.code}</Code>", f"<Message>{escape(self.message)}</Message>"]
        if self.resource:
            parts.append(f"<Resource>{xml_text(self.resource)}</Resource>")
        for name, value in self.extra.items():
            parts.append(f"<{name}>{xml_text(str(value))}</{name}>")
        parts.append(f"<RequestId>{request_id}</RequestId>")
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>' + "".join(parts) + "</Error>").encode()


def xml_doc(root: str, body: str, namespace: bool = True) -> bytes:
    """Wrap ``body`` (already-escaped XML) in a root element with the S3 namespace."""
    ns = f' xmlns="{S3_NS}"' if namespace else ""
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<{root}{ns}>{body}</{root}>'.encode()


# C0 control characters as character references, as S3 writes them in keys: TAB, LF and CR
# then reach a parser as they were (it would turn a literal CR into LF); the others, which
# XML 1.0 cannot carry at all, come as S3 sends them rather than as raw bytes
_CONTROL_REFS = {c: f"&#x{c:X};" for c in range(32)}


def xml_text(value: str) -> str:
    """``value`` escaped for XML text: &, <, > and the control characters."""
    text = escape(value)
    if not text.isprintable():  # ordinary text skips the second pass
        text = text.translate(_CONTROL_REFS)
    return text


def el(name: str, value: object) -> str:
    """One escaped element ``<name>value</name>``."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"<{name}>{xml_text(str(value))}</{name}>"


def parse_xml(body: bytes) -> ET.Element:
    """Parse a request body, namespaces stripped; ``MalformedXML`` when it is not XML."""
    if not body or not body.strip():
        raise S3Error("MalformedXML")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise S3Error("MalformedXML", f"The XML you provided was not well-formed: {exc}") from None
    for node in root.iter():
        if isinstance(node.tag, str) and "}" in node.tag:
            node.tag = node.tag.split("}", 1)[1]
    return root


def child_text(node: ET.Element, name: str, default: str | None = None) -> str | None:
    """Text of the first child called ``name`` (namespaces already stripped)."""
    found = node.find(name)
    if found is None:
        return default
    return found.text or ""

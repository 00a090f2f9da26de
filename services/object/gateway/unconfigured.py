"""What S3 answers to reading bucket settings this gateway has no support for setting (none is
ever configured): the "not configured" answer real S3 gives, instead of NotImplemented.
Setting them stays NotImplemented (see ``UNSUPPORTED`` in :mod:`.app`)."""
from __future__ import annotations

from .errors import S3Error, el, xml_doc
from .request import Request, Response, xml_response

# bucket sub-resource -> the answer of a GET when nothing is configured
_BUCKET = {
    "website": lambda b: S3Error("NoSuchWebsiteConfiguration", BucketName=b.name),
    "replication": lambda b: S3Error("ReplicationConfigurationNotFoundError", BucketName=b.name),
    "logging": lambda b: xml_doc("BucketLoggingStatus", ""),
    "notification": lambda b: xml_doc("NotificationConfiguration", ""),
    "requestPayment": lambda b: xml_doc("RequestPaymentConfiguration", el("Payer", "BucketOwner")),
    "accelerate": lambda b: xml_doc("AccelerateConfiguration", ""),
}
ANSWERED = set(_BUCKET) | {"torrent"}


def answers(req: Request) -> bool:
    """Whether this module answers ``req`` (a GET of one of the sub-resources above)."""
    return req.method == "GET" and any(name in req.query for name in ANSWERED)


def bucket_answer(bucket, req: Request) -> Response | None:
    """The answer to a GET of an unconfigured bucket sub-resource, or None."""
    if req.method != "GET":
        return None
    for name, make in _BUCKET.items():
        if name in req.query:
            out = make(bucket)
            if isinstance(out, S3Error):
                raise out
            return xml_response(out)
    return None


def object_answer(bucket, req: Request) -> None:
    """GetObjectTorrent: no object is shared over BitTorrent here (S3 no longer serves it)."""
    if req.method == "GET" and "torrent" in req.query:
        raise S3Error("NoSuchKey", "The specified key does not exist.", resource=f"/{bucket.name}/{req.key}",
                      Key=req.key)

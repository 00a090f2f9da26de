"""What S3 answers to the sub-resources this gateway has no support for (see ``UNSUPPORTED``
in :mod:`.routes`): reading a bucket setting that can never be configured here gets the
"not configured" answer real S3 gives, GetObjectTorrent the answer S3 gives today, and
everything else NotImplemented. Each is a handler of the route table, reached only after the
request was authenticated and authorized, as S3 does."""
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


def bucket_handler(name: str):
    """The handler of a GET of the unconfigured bucket sub-resource ``name`` (None if S3 has no
    "not configured" answer for it)."""
    make = _BUCKET.get(name)
    if make is None:
        return None

    async def answer(gw, req: Request, bucket) -> Response:
        out = make(bucket)
        if isinstance(out, S3Error):
            raise out
        return xml_response(out)
    return answer


def not_implemented(name: str):
    """The handler of a sub-resource this gateway does not implement."""
    async def refuse(gw, req: Request, bucket) -> Response:
        raise S3Error("NotImplemented", f"The '{name}' sub-resource is not implemented by Strata")
    return refuse


async def get_torrent(gw, req: Request, bucket) -> Response:
    """GetObjectTorrent: no object is shared over BitTorrent here (S3 no longer serves it)."""
    raise S3Error("NoSuchKey", "The specified key does not exist.", resource=f"/{bucket.name}/{req.key}",
                  Key=req.key)

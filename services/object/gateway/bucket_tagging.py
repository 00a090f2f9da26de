"""Bucket tagging: Put/Get/DeleteBucketTagging (the tag set kept in the order it was sent)."""
from __future__ import annotations

from .errors import S3Error, child_text, el, parse_xml, xml_doc
from .request import Request, Response, xml_response

MAX_BUCKET_TAGS = 50


def parse_tag_set(body: bytes, max_tags: int = MAX_BUCKET_TAGS) -> list[list[str]]:
    """[[key, value], ...] of a Tagging document (``MalformedXML`` / ``InvalidTag`` as S3)."""
    root = parse_xml(body)
    if root.tag != "Tagging" or root.find("TagSet") is None:
        raise S3Error("MalformedXML")
    tags: list[list[str]] = []
    seen = set()
    for tag in root.find("TagSet").findall("Tag"):
        key, value = child_text(tag, "Key"), child_text(tag, "Value")
        if key is None or value is None:
            raise S3Error("MalformedXML", "Every Tag needs a Key and a Value")
        if key in seen:
            raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key", TagKey=key)
        if not 1 <= len(key) <= 128:
            raise S3Error("InvalidTag", "The TagKey you have provided is too long, max 128", TagKey=key)
        if len(value) > 256:
            raise S3Error("InvalidTag", "The TagValue you have provided is too long, max 256", TagKey=key)
        if key.lower().startswith("aws:"):
            raise S3Error("InvalidTag", "System tags cannot be added/updated by requester", TagKey=key)
        seen.add(key)
        tags.append([key, value])
    if len(tags) > max_tags:
        raise S3Error("BadRequest", f"Bucket tag count cannot be greater than {max_tags}")
    return tags


async def put_tagging(gw, req: Request, bucket) -> Response:
    """PutBucketTagging (replaces the tag set)."""
    tags = parse_tag_set(await req.body().read_all(64 * 1024))
    await gw.run(bucket.set_setting, "tags", tags)
    return Response(204)


async def get_tagging(gw, req: Request, bucket) -> Response:
    """GetBucketTagging (``NoSuchTagSet`` when the bucket has no tags)."""
    tags = bucket.settings.get("tags")
    if not tags:
        raise S3Error("NoSuchTagSet", BucketName=bucket.name)
    body = "".join(f"<Tag>{el('Key', k)}{el('Value', v)}</Tag>" for k, v in tags)
    return xml_response(xml_doc("Tagging", f"<TagSet>{body}</TagSet>"))


async def delete_tagging(gw, req: Request, bucket) -> Response:
    """DeleteBucketTagging."""
    await gw.run(bucket.set_setting, "tags", None)
    return Response(204)

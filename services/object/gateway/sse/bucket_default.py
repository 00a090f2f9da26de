"""Bucket default encryption: the ServerSideEncryptionConfiguration document, read into the
bucket setting ``{"alg", ["kid"], ["bk"]}`` and written back for GetBucketEncryption."""
from __future__ import annotations

from ..errors import ERROR_CODES, S3Error, child_text, el, parse_xml, xml_doc
from .keys import Keyring

ERROR_CODES.update({
    "ServerSideEncryptionConfigurationNotFoundError": (404, "The server side encryption configuration "
                                                            "was not found"),
})


def parse_bucket_encryption(body: bytes, keyring: Keyring) -> dict:
    """A ServerSideEncryptionConfiguration document -> the bucket setting
    ``{"alg", ["kid"], ["bk"]}`` (``MalformedXML`` / ``InvalidArgument`` / ``KMS.NotFoundException``)."""
    root = parse_xml(body)
    if root.tag != "ServerSideEncryptionConfiguration":
        raise S3Error("MalformedXML")
    rules = root.findall("Rule")
    if len(rules) != 1:
        raise S3Error("MalformedXML", "A ServerSideEncryptionConfiguration holds exactly one Rule")
    default = rules[0].find("ApplyServerSideEncryptionByDefault")
    if default is None:
        raise S3Error("MalformedXML", "The Rule needs ApplyServerSideEncryptionByDefault")
    alg = child_text(default, "SSEAlgorithm")
    kid = child_text(default, "KMSMasterKeyID")
    if alg not in ("AES256", "aws:kms"):
        raise S3Error("MalformedXML" if alg is None else "InvalidArgument",
                      "SSEAlgorithm must be AES256 or aws:kms", ArgumentName="SSEAlgorithm",
                      ArgumentValue=str(alg))
    setting = {"alg": alg}
    if kid is not None:
        if alg != "aws:kms":
            raise S3Error("InvalidArgument", "a KMSMasterKeyID is not applicable if the default sse algorithm "
                          "is not aws:kms", ArgumentName="ApplyServerSideEncryptionByDefault")
        setting["kid"] = keyring.kms_id(kid)
        setting["kid_given"] = kid
    keyring.kek(b"sse-s3")  # no master key: refused now rather than at every PUT
    bk = (child_text(rules[0], "BucketKeyEnabled") or "false").lower()
    if bk not in ("true", "false"):
        raise S3Error("MalformedXML", "BucketKeyEnabled must be true or false")
    if bk == "true":
        setting["bk"] = True
    return setting


def bucket_encryption_xml(setting: dict) -> bytes:
    """GetBucketEncryption's document for a bucket setting."""
    inner = el("SSEAlgorithm", setting["alg"])
    if setting.get("kid_given"):
        inner += el("KMSMasterKeyID", setting["kid_given"])
    rule = (f"<Rule><ApplyServerSideEncryptionByDefault>{inner}</ApplyServerSideEncryptionByDefault>"
            + el("BucketKeyEnabled", bool(setting.get("bk"))) + "</Rule>")
    return xml_doc("ServerSideEncryptionConfiguration", rule)

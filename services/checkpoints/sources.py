"""Where a checkpoint version's shards are, seen the same way by the checks of `verify` (no
Django): `DirectorySource(root)` for files under a directory, `S3Source` for objects under an
S3 prefix. Both answer `stat(name)` (size and the checksums the store already holds, or None
when missing) and `open(name)`.

`S3Source(client, bucket, prefix)` answers `stat(name)` with HeadObject (checksum mode on,
so the CRC32C/SHA-256 the gateway verified at upload come back without reading the data)
and `open(name)` with GetObject. `parse_prefix("s3://bucket/job/step-N/")` splits a
version's S3 prefix. `source_for(prefix, config)` builds one with its own client; the
management plane (`service`) is the one caller, with the object service's gateway or the
`STRATA_CHECKPOINT_S3` setting as `config`: {"endpoint", "access_key", "secret_key",
"region"?}.

`remove_tree(path)` deletes a version's directory (retention, tier-down, pre-warm, a begin
over an old directory), emptying its files first so a ceph pool gets the space back.
"""
import base64
import contextlib
import os
import shutil
import stat

from plumbing.errors import Conflict, Invalid, Unavailable


class S3NotConfigured(RuntimeError):
    """No S3 endpoint is known for checkpoint buckets yet."""


def remove_tree(root: str) -> None:
    """Delete a version's directory, each file that nothing else links truncated first.

    An unlinked file keeps its data while another client still holds it: on a ceph pool,
    Ganesha's CephFS client (FSAL_CEPH) keeps the inode of every file written through NFS
    in its cache, and the MDS neither recalls it (it recalls nothing from a client holding
    fewer than mds_min_caps_per_client = 100 capabilities) nor purges the stray meanwhile,
    so the bytes would stay in the pool (measured: none of 64 MiB freed in 90 s). A
    truncate is done by the MDS whoever holds the inode, so the space comes back at once
    (2 s); only the empty stray inode waits for Ganesha's cache. A file with other links
    (a shard hard-linked into a kept version) is left whole."""
    for where, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(where, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size:
                os.truncate(path, 0)
    shutil.rmtree(root)


def parse_prefix(s3_prefix: str) -> tuple:
    """("bucket", "key/prefix/") from "s3://bucket/key/prefix/"."""
    if not s3_prefix.startswith("s3://"):
        raise ValueError(f"{s3_prefix!r} is not an s3:// prefix")
    bucket, _, key = s3_prefix[5:].partition("/")
    return bucket, key


def _hex(b64: str | None, length: int) -> str | None:
    if not b64 or "-" in b64:  # a composite (multipart) checksum is not the object's
        return None
    raw = base64.b64decode(b64)
    return raw.hex() if len(raw) == length else None


class DirectorySource:
    """Shards as files under a directory (a version's path on a file system)."""

    def __init__(self, root: str):
        self.root = root

    def stat(self, name: str):
        """(size, stored checksums {algo: hex}) or None when missing; IsADirectoryError if not a file."""
        path = os.path.join(self.root, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if not os.path.isfile(path):
            raise IsADirectoryError(name)
        return st.st_size, {}

    def open(self, name: str):
        return open(os.path.join(self.root, name), "rb")


class S3Source:
    """The objects `<prefix><name>` of one bucket, seen as shards."""

    def __init__(self, client, bucket: str, prefix: str):
        self.client, self.bucket, self.prefix = client, bucket, prefix
        self._gone = None  # whether the bucket is gone, once asked

    def stat(self, name: str):
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + name,
                                           ChecksumMode="ENABLED")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound") and not self._bucket_gone():
                return None
            raise
        stored = {}
        crc = _hex(head.get("ChecksumCRC32C"), 4)
        sha = _hex(head.get("ChecksumSHA256"), 32)
        if crc:
            stored["crc32c"] = crc
        if sha:
            stored["sha256"] = sha
        return head["ContentLength"], stored

    def _bucket_gone(self) -> bool:
        """A HEAD of a missing key and of a missing bucket both answer a bare 404: asked once
        per source, not once per missing shard."""
        from botocore.exceptions import ClientError

        if self._gone is None:
            try:
                self.client.head_bucket(Bucket=self.bucket)
                self._gone = False
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in MISSING_BUCKET:
                    raise
                self._gone = True
        return self._gone

    def child(self, name: str) -> "S3Source":
        """The objects under `<prefix><name>/` (a step's, under its job's), on the same client."""
        return S3Source(self.client, self.bucket, f"{self.prefix}{name}/")

    def open(self, name: str):
        return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"]

    def list(self) -> list:
        """Every object under the prefix as a manifest entry {name, size}."""
        out, token = [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": self.prefix}
            if token:
                kw["ContinuationToken"] = token
            page = self.client.list_objects_v2(**kw)
            out += [{"name": o["Key"][len(self.prefix):], "size": o["Size"]}
                    for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return out
            token = page.get("NextContinuationToken")


    def subdirs(self) -> list:
        """Names of the "directories" directly under the prefix (S3 common prefixes)."""
        out, token = [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": self.prefix, "Delimiter": "/"}
            if token:
                kw["ContinuationToken"] = token
            page = self.client.list_objects_v2(**kw)
            out += [p["Prefix"][len(self.prefix):].rstrip("/")
                    for p in page.get("CommonPrefixes", [])]
            if not page.get("IsTruncated"):
                return out
            token = page.get("NextContinuationToken")

    def read(self, name: str) -> bytes:
        with contextlib.closing(self.open(name)) as body:
            return body.read()

    def legal_hold(self, on: bool) -> int:
        """Put (or lift) an S3 legal hold on the current version of every object under the
        prefix, when the bucket has Object Lock; return how many (0 without Object Lock)."""
        try:
            self.client.get_object_lock_configuration(Bucket=self.bucket)
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ObjectLockConfigurationNotFoundError":
                return 0
            raise
        count = 0
        for page in self.client.get_paginator("list_object_versions").paginate(Bucket=self.bucket,
                                                                              Prefix=self.prefix):
            for v in page.get("Versions", []):
                if v["IsLatest"]:
                    self.client.put_object_legal_hold(Bucket=self.bucket, Key=v["Key"], VersionId=v["VersionId"],
                                                      LegalHold={"Status": "ON" if on else "OFF"})
                    count += 1
        return count

    def delete_all(self) -> int:
        """Delete every object under the prefix, and abort the multipart uploads a killed
        save left there (their parts hold space too); return how many objects went."""
        keys = [self.prefix + e["name"] for e in self.list()]
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.prefix)
        for page in pages:
            for upload in page.get("Uploads", []):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                                   UploadId=upload["UploadId"])
        return len(keys)


MISSING_BUCKET = ("NoSuchBucket", "404", "NotFound")


@contextlib.contextmanager
def plain_errors(bucket: str, missing=Conflict):
    """botocore's errors inside as domain errors a user can act on: a bucket that does not
    exist is ``missing`` (Conflict by default: it vanished under the job), a name S3 cannot
    take is Invalid, a gateway that does not answer or refuses the plane's key Unavailable."""
    from botocore import exceptions as bx  # boto3 is loaded only where S3 is used

    try:
        yield
    except bx.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in MISSING_BUCKET:
            raise missing(f"There is no bucket {bucket}: create it, or give the job another.",
                          code="no_such_bucket") from None
        raise Unavailable(f"The S3 gateway refused the plane's request on bucket {bucket}: "
                          f"{code or exc}", code="s3_refused") from None
    except bx.ParamValidationError as exc:
        raise Invalid(f"{bucket!r} is not a bucket name S3 takes: {exc}") from None
    except (bx.EndpointConnectionError, bx.ConnectionClosedError, bx.ReadTimeoutError,
            bx.ConnectTimeoutError) as exc:
        raise Unavailable(f"The S3 gateway does not answer: {exc}",
                          code="s3_unreachable") from None


def make_client(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1"):
    """A boto3 S3 client for a Strata gateway (path-style addressing, SigV4)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key, region_name=region,
                        config=Config(s3={"addressing_style": "path"},
                                      signature_version="s3v4", retries={"max_attempts": 2}))


def source_for(s3_prefix: str, config: dict | None) -> S3Source:
    """The S3Source of a version's prefix, with a client built from `config`."""
    if not config:
        raise S3NotConfigured(
            "No S3 endpoint is configured for checkpoints: the object service has not "
            "started its gateway yet (or set STRATA_CHECKPOINT_S3).")
    bucket, prefix = parse_prefix(s3_prefix)
    client = make_client(config["endpoint"], config["access_key"], config["secret_key"],
                         config.get("region", "us-east-1"))
    return S3Source(client, bucket, prefix)

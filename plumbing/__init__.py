"""Plumbing every layer of Strata uses, without Django: durable atomic writes, checksums,
progress meters, tree digests, sealed secrets, the I/O budget's token bucket, the Redis URL,
child-process supervision, the one REST client with job polling and the HTTP protocol
Strata's web servers run on. It imports nothing of Strata, so the dataplane, the S3 gateway
and the SDKs can use it alone."""

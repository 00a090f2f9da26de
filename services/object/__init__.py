"""The object service: Strata's S3 gateway (:mod:`.gateway`, no Django) and its management plane
(Django app label ``object``: buckets and access keys mirrored into the gateway). See
``services/object/README.md``.
"""

"""Pools on a Ceph cluster (scale-out). Nothing here loads librados until a driver is used.

- :mod:`.driver`: the ``ceph`` driver (RADOS pools, capacity, health).
- :mod:`.rbd`: volumes as RBD images, snapshots, clones, send streams.
- :mod:`.filesystems`: the driver's file-system methods, over :mod:`.cephfs`.
- :mod:`.cephfs`: file systems as directories of the cluster's CephFS (quotas, snapshots, pins).
- :mod:`.treediff`: tree differences and the send stream of CephFS file systems.
- :mod:`.bindings`: Ceph's Python bindings (rados, rbd, cephfs) for the running Python.
- :mod:`.devcluster`: a small Ceph cluster on 127.0.0.1 for development and tests.
"""

"""Block volumes on SPDK, driven over JSON-RPC (imported only when an spdk pool is used).

- :mod:`.driver`: the ``spdk`` driver (lvol stores, thin lvols, snapshots, clones, QoS).
- :mod:`.bdevs`: base bdevs of spdk pools (AIO files, block devices, malloc, NVMe, raid).
- :mod:`.nvmf`: NVMe-oF/TCP exports, one subsystem per exported volume.
- :mod:`.rpc`: the JSON-RPC caller, with SPDK's errors made specific.
"""

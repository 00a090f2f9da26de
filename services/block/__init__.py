"""Block service: iSCSI, NBD, vhost-user-blk and NVMe-oF exports of volumes."""

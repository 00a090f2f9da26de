from services.protection.api import views


def register(router) -> None:
    router.register("snapshot-schedules", views.SnapshotScheduleViewSet)
    router.register("replication-peers", views.ReplicationPeerViewSet)
    router.register("replications", views.ReplicationViewSet)
    router.register("replicas", views.ReplicaViewSet)
    router.register("replica-transfers", views.ReplicaTransferViewSet,
                    basename="replica-transfer")
    router.register("backup-targets", views.BackupTargetViewSet)
    router.register("backups", views.BackupViewSet)
    router.register("restore-points", views.RestorePointViewSet)
    router.register("bucket-snapshots", views.BucketSnapshotViewSet, basename="bucket-snapshot")
    router.register("bucket-replications", views.BucketReplicationViewSet)

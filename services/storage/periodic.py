"""The storage core's periodic tasks (Celery beat; collected by console/settings.py through
plane.discovery)."""
PERIODIC_TASKS = {
    "reconcile-storage": {"task": "storage.reconcile_all", "schedule": 60.0},
    # a pool whose mount went away (ceph-fuse killed) is attached again within seconds
    "attach-pools": {"task": "storage.attach_pools", "schedule": 10.0},
    "sample-metrics": {"task": "storage.sample_metrics", "schedule": 15.0},
}

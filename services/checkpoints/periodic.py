"""The checkpoint service's periodic tasks (Celery beat; collected by console/settings.py
through plane.discovery). The names are those the rows had when migrations made them, so an
upgraded appliance's beat updates its rows rather than adding second ones."""
PERIODIC_TASKS = {
    "checkpoints: abort stale versions": {"task": "checkpoints.abort_stale", "schedule": 60.0},
    "checkpoints: commit DCP/Orbax checkpoints found on disk": {"task": "checkpoints.scan_all",
                                                               "schedule": 30.0},
    "checkpoints: retention": {"task": "checkpoints.retention_all", "schedule": 600.0},
    "checkpoints: tier superseded versions down to the capacity pool": {
        "task": "checkpoints.tier_all", "schedule": 60.0},
}

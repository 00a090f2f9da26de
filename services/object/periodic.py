"""The object service's periodic tasks (Celery beat; collected by console/settings.py through
plane.discovery). The names are those the rows had when migrations made them, so an upgraded
appliance's beat updates its rows rather than adding second ones."""
PERIODIC_TASKS = {
    "object: reconcile buckets and usage": {"task": "object.reconcile_buckets",
                                            "schedule": 300.0},
    "object: lifecycle pass": {"task": "object.lifecycle", "schedule": 3600.0},
    "object: start the gateway once its pool is attached": {"task": "object.open_gate",
                                                            "schedule": 10.0},
}

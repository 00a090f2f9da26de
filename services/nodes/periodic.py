"""The cluster's periodic task (Celery beat; collected by console/settings.py through
plane.discovery): a node silent for 15 s is written down within 5 s more (the API reports it
down from the 15th second already, from its last heartbeat)."""
PERIODIC_TASKS = {
    "mark-nodes-down": {"task": "nodes.mark_down", "schedule": 5.0},
}

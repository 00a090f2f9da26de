"""The file service's periodic task (Celery beat; collected by console/settings.py through
plane.discovery): needs of NFS grace that nothing else gives up (services/file/grace.py)."""
PERIODIC_TASKS = {
    "release-stale-nfs-grace": {"task": "file.release_stale_grace", "schedule": 10.0},
}

"""Run by every `strata up` after pools are online: re-apply every block export into the
tgtd and qemu-storage-daemon that `strata up` just started (errors go on the export rows)."""
import logging

from django.conf import settings

from services.block import service, up

log = logging.getLogger(__name__)


def reconcile() -> dict:
    """After `strata up` started tgtd or qemu-storage-daemon again (they keep nothing across
    a restart): every export, LUN, target and ACL back as the rows say."""
    summary = service.reconcile_all()
    return {k: summary[k] for k in ("online", "error", "removed") if k in summary}


def bootstrap(creds: dict) -> dict:
    """Reconcile the exports; add the block endpoints to credentials.json."""
    summary = service.reconcile_all()
    if summary.get("error"):
        log.error("block: %s export(s) could not be applied; see their error field",
                  summary["error"])
    kw = up.runtime_kwargs(settings.DATA_DIR, settings.SERVICE_OPTIONS)
    return {"iscsi_portal": f"{kw['host']}:{kw['iscsi_port']}",
            "nbd_endpoint": f"{kw['host']}:{kw['nbd_port']}"}

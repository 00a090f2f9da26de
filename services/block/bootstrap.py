"""Run by every `strata up` after pools are online: re-apply every block export into the
tgtd, qemu-storage-daemon and nvmf_tgt that `strata up` just started (errors go on the
export rows)."""
import logging

from django.conf import settings

from services.block import service, up
from services.storage import service as storage
from services.storage.models import Pool

log = logging.getLogger(__name__)


def reconcile() -> dict:
    """After `strata up` started tgtd, qemu-storage-daemon or nvmf_tgt again (they keep
    nothing across a restart): the spdk pools back online (nvmf_tgt loads their lvol stores
    from the devices), then every export, LUN, target and ACL back as the rows say."""
    pools = {p.name: storage.refresh_pool(p).state for p in Pool.objects.filter(driver="spdk")}
    summary = service.reconcile_all()
    out = {k: summary[k] for k in ("online", "error", "removed") if k in summary}
    return {**out, "spdk_pools": pools} if pools else out


def bootstrap(creds: dict) -> dict:
    """Reconcile the exports; add the block endpoints to credentials.json."""
    summary = service.reconcile_all()
    if summary.get("error"):
        log.error("block: %s export(s) could not be applied; see their error field",
                  summary["error"])
    kw = up.runtime_kwargs(settings.DATA_DIR, settings.SERVICE_OPTIONS)
    return {"iscsi_portal": f"{kw['host']}:{kw['iscsi_port']}",
            "nbd_endpoint": f"{kw['host']}:{kw['nbd_port']}"}

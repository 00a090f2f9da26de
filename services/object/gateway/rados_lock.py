"""One holder at a time across every gateway of a RADOS pool, on any node: an exclusive
``cls_lock`` lock with a lease on one object of the pool (the lifecycle pass's
``strata.lifecycle``), the counterpart of :class:`.shared.FileLock` for the local store.

The lease (``LEASE`` seconds) is renewed every third of it while held, so a pass may last
any time; a gateway that dies holding the lock frees it when its lease runs out. The object's
omap ``last_pass`` records when a pass ended, so gateways that each run passes on a timer run
about one per interval between them (:func:`.lifecycle.apply_lifecycle`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

import rados

log = logging.getLogger("strata.s3.rados")
LEASE = 60
POLL = 0.5
RENEW = 1   # LIBRADOS_LOCK_FLAG_MAY_RENEW


class RadosLock:
    """The exclusive lock ``name`` on object ``oid`` of ``ioctx``."""

    def __init__(self, ioctx, oid: str, name: str = "lock", lease: int = LEASE):
        self.io, self.oid, self.name, self.lease = ioctx, oid, name, lease
        self.desc = f"{socket.gethostname()} pid {os.getpid()}"

    def _take(self, cookie: str, flags: int = 0) -> bool:
        try:
            self.io.lock_exclusive(self.oid, self.name, cookie, self.desc, self.lease, flags)
            return True
        except (rados.ObjectBusy, rados.ObjectExists):
            return False

    def _release(self, cookie: str) -> None:
        with contextlib.suppress(rados.ObjectNotFound, rados.Error):
            self.io.unlock(self.oid, self.name, cookie)

    @contextlib.asynccontextmanager
    async def hold(self):
        """Hold the lock for the ``async with`` block (waits while another holder has it)."""
        loop = asyncio.get_running_loop()
        cookie = uuid.uuid4().hex
        while not await loop.run_in_executor(None, self._take, cookie):
            await asyncio.sleep(POLL)
        renewer = loop.create_task(self._renew(cookie))
        try:
            yield
        finally:
            renewer.cancel()
            await loop.run_in_executor(None, self._release, cookie)

    async def _renew(self, cookie: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.lease / 3)
            if not await loop.run_in_executor(None, self._take, cookie, RENEW):
                log.error("lock %s on %s: the lease ran out and another gateway took it", self.name, self.oid)

    def last_pass(self) -> float:
        """When a holder last called :meth:`record_pass` (0: never; blocking)."""
        with rados.ReadOpCtx() as op:
            it, _ = self.io.get_omap_vals_by_keys(op, ("last_pass",))
            try:
                self.io.operate_read_op(op, self.oid)
            except rados.ObjectNotFound:
                return 0.0
            raw = dict(it).get("last_pass")
        return float(raw) if raw else 0.0

    def record_pass(self) -> None:
        with rados.WriteOpCtx() as op:
            self.io.set_omap(op, ("last_pass",), (repr(time.time()).encode(),))
            self.io.operate_write_op(op, self.oid)

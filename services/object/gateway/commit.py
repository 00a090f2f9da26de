"""Group commit: one segment fsync and one transaction per index shard for every PUT that
arrived while the previous batch was being made durable.

A request stores its bytes (its own fsynced file; or, for a small body, a segment: appended
already, or handed to the committer to append), then awaits :meth:`GroupCommitter.commit`. The
committer takes everything queued and, in one worker thread, appends the batch's small bodies
(one ``pwritev``), fdatasyncs the dirty segments, applies the index ops shard by shard (each
shard one durable SQLite transaction) and only then wakes the requests, which answer 200.

All of a batch runs in that one thread, the shards one after the other: a hand-off to other
threads costs more CPU (wake-ups, GIL hand-overs) than the fsyncs it would overlap, and a
longer batch gathers more requests for the next one.

Before a batch starts, the committer yields to the event loop while each step brings more to
commit, for at most ``gather`` seconds (PostgreSQL's ``commit_delay``, taken only while
requests keep coming): requests whose bytes the loop has yet to read join this batch instead
of paying for fsyncs and a transaction of their own in the next. A lone writer's step brings
nothing, so its PUT waits a few loop steps (microseconds); with 16 clients a worker a 4 KiB
PUT costs 8-12% less CPU (A/B pairs, see services/object/README.md), for at most ``gather``
more latency.

Each worker process (:mod:`.workers`) has its own committer, its own segments and the same
index shards (SQLite serialises the transactions of all of them). The committer keeps the
worker's sequence floor (:class:`.shared.SeqFloors`) at the lowest sequence number of a put in
flight, so the change feed never moves past a write another worker has yet to commit.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from .index import BucketIndex, Op, OpResult
from .shared import IDLE, SeqFloors, seq_floor_now
from .storage import SegmentStore, remove_location

log = logging.getLogger("strata.s3.commit")
GATHER_SECONDS = 0.005   # the longest a batch waits for more (config: commit_gather_ms)
GATHER_IDLE_STEPS = 4    # loop steps that bring nothing to commit, after which it waits no more


class GroupCommitter:
    """Batches index writes (and the segment fsync they depend on) across concurrent requests."""

    def __init__(self, segments: SegmentStore, floors: SeqFloors, gather: float = GATHER_SECONDS):
        self.segments = segments
        self.floors = floors
        self.gather = gather
        self.in_flight: dict[int, int] = defaultdict(int)   # seq of a put -> how many queued
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="s3-commit")
        # (index, op, segment data: True if appended already, bytes to append, or False; future)
        self.pending: list[tuple[BucketIndex, Op, bool | bytes, asyncio.Future]] = []
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the background commit loop on the running event loop."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the loop after the current batch."""
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.pool.shutdown(wait=True)

    async def commit(self, index: BucketIndex, op: Op, segment_data: bool | bytes) -> OpResult:
        """Queue ``op``; returns once it (and the segment bytes it points to) is durable.
        ``segment_data``: True when the op's record points to bytes appended to a segment,
        or the bytes themselves, which the batch appends (and sets ``op.record.loc`` to)."""
        fut = asyncio.get_running_loop().create_future()
        if op.record is not None:
            self.in_flight[op.record.seq] += 1
        self.pending.append((index, op, segment_data, fut))
        self.wake.set()
        return await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.wake.wait()
            await self._gather(loop)
            self.wake.clear()
            batch, self.pending = self.pending, []
            if not batch:
                continue
            try:
                outcomes = await loop.run_in_executor(self.pool, self._commit_batch, batch)
            except Exception as exc:  # noqa: BLE001 - every waiter gets the failure
                log.exception("group commit failed")
                outcomes = [exc] * len(batch)
            garbage = []
            for (_index, op, _seg, fut), outcome in zip(batch, outcomes):
                if op.record is not None:
                    self.in_flight[op.record.seq] -= 1
                    if not self.in_flight[op.record.seq]:
                        del self.in_flight[op.record.seq]
                if isinstance(outcome, OpResult):
                    garbage.extend(r.loc for r in outcome.removed if "seg" not in r.loc)
                if not fut.done():
                    if isinstance(outcome, BaseException):
                        fut.set_exception(outcome)
                    else:
                        fut.set_result(outcome)
            self.update_floor()
            if garbage:
                loop.run_in_executor(self.pool, _remove_all, garbage)

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Yield to the loop until GATHER_IDLE_STEPS steps in a row bring nothing more to
        commit, or ``gather`` seconds have passed (0: not at all)."""
        deadline = loop.time() + self.gather
        seen, idle = len(self.pending), 0
        while idle < GATHER_IDLE_STEPS and loop.time() < deadline:
            await asyncio.sleep(0)
            idle = idle + 1 if len(self.pending) == seen else 0
            seen = len(self.pending)

    def before_seq(self) -> None:
        """Call before taking a sequence number for a put: with nothing in flight, publish
        a floor at or below it (see :class:`.shared.SeqFloors`)."""
        if not self.in_flight:
            self.floors.set(seq_floor_now())

    def update_floor(self) -> None:
        """Publish the lowest sequence number in flight (idle if none; call on the event loop,
        where no put is between its sequence number and its queueing)."""
        self.floors.set(min(self.in_flight, default=IDLE))

    def _commit_batch(self, batch) -> list:
        outcomes: list = [None] * len(batch)
        bodies = [i for i, entry in enumerate(batch) if isinstance(entry[2], (bytes, bytearray))]
        if bodies:
            try:
                locs = self.segments.append_many([batch[i][2] for i in bodies])
            except Exception as exc:  # noqa: BLE001 - those requests fail, the others go on
                for i in bodies:
                    outcomes[i] = exc
            else:
                for i, loc in zip(bodies, locs):
                    batch[i][1].record.loc = loc
        if bodies or any(entry[2] is True for entry in batch):
            self.segments.sync()
        groups: dict[tuple[int, int], list[int]] = {}
        shards = {}
        for i, (index, op, _, _) in enumerate(batch):
            if outcomes[i] is not None:
                continue
            key = op.record.key if op.record is not None else op.key
            shard_no = index.shard_of(key)
            group = (id(index), shard_no)
            if group not in groups:
                groups[group] = []
                shards[group] = index.shards[shard_no]
            groups[group].append(i)
        for group, members in groups.items():
            try:
                results = shards[group].apply([batch[i][1] for i in members])
            except Exception as exc:  # noqa: BLE001
                results = [exc] * len(members)
            for i, res in zip(members, results):
                outcomes[i] = res
        return outcomes


def _remove_all(locs: list[dict]) -> None:
    for loc in locs:
        try:
            remove_location(loc)
        except OSError:
            log.exception("could not remove replaced object data %s", loc)

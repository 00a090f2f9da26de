"""Requests admitted by class of work (``plumbing.workclass``), so that reads of a samples
bucket are not queued behind a burst of checkpoint PUTs.

Each gateway process admits at most ``slots`` object requests at a time (config ``qos``:
``{"shares": {class: share}, "buckets": {bucket: class}, "slots": N, "queue": N}``; a bucket
not named is ``samples``). A class may hold its share of the slots among the classes active
now (a request in flight or waiting, or one seen in the last ``ACTIVE_SECONDS``), at least
one: alone, a checkpoint burst may use every slot; while a reader of samples is active, it
gets only ``slots x 400 / (400 + 1000)`` with the default shares, so the reader's requests
find the disk and the cores less busy. Whatever the others do, every class keeps a slot of
its own (``reserved``: its part of a quarter of the slots by share, at least one): slow
uploads to a checkpoints bucket can never hold the slot a samples GET needs. When requests
of several classes wait, a freed slot goes to the class with the fewest requests in flight
per unit of share (weighted fair). A class's queue is bounded (``queue``): beyond it the
request is refused with 503 SlowDown, which S3 clients retry.

A request holds its slot while its handler runs: a PUT while its body arrives and is
written, a GET until its answer starts (the bytes are then sent by the server).

The gateway runs in the samples class's cpu group; a body of another class (a checkpoint
upload) is hashed and written on threads moved into that class's group
(``plumbing.workclass.thread_joiner``), so that the kernel weighs that work with its share
and the event loop serving sample GETs comes first. The event loop itself (receiving the
body's bytes) stays in the samples group.
"""
from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque

from plumbing.workclass import CLASSES, DEFAULT_SHARES, SAMPLES

from .errors import S3Error

# the class of the request being served (set while it holds its slot): a body's hashing and
# writing run on threads of that class's cpu group (Gateway.io_for)
REQUEST_CLASS: contextvars.ContextVar[str] = contextvars.ContextVar("request_class", default=SAMPLES)

DEFAULT_SLOTS = 16
DEFAULT_QUEUE = 1024
ACTIVE_SECONDS = 0.5   # a class that sent a request this recently still counts as active


class Admission:
    """Slots per class of work for one gateway process (one event loop)."""

    def __init__(self):
        self.in_flight = {c: 0 for c in CLASSES}
        self.waiting = {c: deque() for c in CLASSES}
        self.seen = {c: float("-inf") for c in CLASSES}
        self._timer = None     # wakes waiters once an idle class's window has passed
        self.configure({})

    def configure(self, qos: dict) -> None:
        """Take the config's ``qos`` (called on each request; cheap when unchanged)."""
        key = (tuple(sorted((qos.get("shares") or {}).items())), qos.get("slots"),
               qos.get("queue"))
        if key == getattr(self, "_key", None):
            self.buckets = qos.get("buckets") or {}
            return
        self._key = key
        self.buckets = qos.get("buckets") or {}
        self.shares = {c: int((qos.get("shares") or {}).get(c, DEFAULT_SHARES[c])) for c in CLASSES}
        self.slots = max(len(CLASSES), int(qos.get("slots") or DEFAULT_SLOTS))
        self.queue = int(qos.get("queue") or DEFAULT_QUEUE)
        total = sum(self.shares.values())
        self.reserved = {c: max(1, self.slots * self.shares[c] // (4 * total)) for c in CLASSES}
        self._wake()

    def class_of(self, bucket: str) -> str:
        return self.buckets.get(bucket, SAMPLES)

    def active(self, now: float) -> list[str]:
        return [c for c in CLASSES if self.in_flight[c] or self.waiting[c]
                or now - self.seen[c] < ACTIVE_SECONDS]

    def cap(self, cls: str, now: float | None = None) -> int:
        """The most slots ``cls`` may hold now: its share of the slots among the active
        classes (at least one), and never the other classes' reserves."""
        now = time.monotonic() if now is None else now
        weight = sum(self.shares[c] for c in set(self.active(now)) | {cls})
        fair = max(1, self.slots * self.shares[cls] // weight)
        return min(fair, self.slots - sum(r for c, r in self.reserved.items() if c != cls))

    def _may_start(self, cls: str) -> bool:
        return self.in_flight[cls] < self.cap(cls) and sum(self.in_flight.values()) < self.slots

    async def enter(self, cls: str) -> None:
        """Wait for a slot of class ``cls`` (S3Error SlowDown if its queue is full)."""
        self.seen[cls] = time.monotonic()
        if not self.waiting[cls] and self._may_start(cls):
            self.in_flight[cls] += 1
            return
        if len(self.waiting[cls]) >= self.queue:
            raise S3Error("SlowDown")
        loop = asyncio.get_running_loop()
        ticket = loop.create_future()
        self.waiting[cls].append(ticket)
        if self._timer is None:
            self._timer = loop.call_later(ACTIVE_SECONDS, self._tick)
        try:
            await ticket
        except asyncio.CancelledError:
            if ticket.done() and not ticket.cancelled():
                self.leave(cls)         # admitted as it was cancelled: give the slot back
            elif ticket in self.waiting[cls]:
                self.waiting[cls].remove(ticket)
            raise

    def leave(self, cls: str) -> None:
        self.in_flight[cls] -= 1
        self._wake()

    def _tick(self) -> None:
        """Caps grow when a class goes idle, with nothing leaving: look again, and again
        while requests wait."""
        self._timer = None
        self._wake()
        if any(self.waiting.values()):
            self._timer = asyncio.get_running_loop().call_later(ACTIVE_SECONDS, self._tick)

    def _wake(self) -> None:
        """Hand freed slots to waiting classes, the fewest in flight per share first."""
        while True:
            ready = [c for c in CLASSES if self.waiting[c] and self._may_start(c)]
            if not ready:
                return
            cls = min(ready, key=lambda c: (self.in_flight[c] + 1) / self.shares[c])
            ticket = self.waiting[cls].popleft()
            if ticket.cancelled():
                continue
            self.in_flight[cls] += 1
            ticket.set_result(None)

    def stats(self) -> dict:
        return {c: {"in_flight": self.in_flight[c], "waiting": len(self.waiting[c]),
                    "cap": self.cap(c), "share": self.shares[c]} for c in CLASSES}


ADMISSION = Admission()  # this process's (each gateway worker is one process)

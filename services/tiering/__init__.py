"""Tiering: the background I/O budget every worker shares, and tier moves.

- ``iobudget.py`` (no Django): token buckets in Redis, one per appliance and optionally one
  per job class, taken all-or-nothing in one Lua script on Redis time; ``foreground()``
  marks foreground traffic for a second, during which background keeps
  ``foreground_share`` of its rates. ``budget.py`` builds it from the ``IOBudgetSetting``
  row (re-read every 5 s) on the broker's Redis; ``budget.throttle(stream, job_class)``
  wraps any byte stream; protection uses the classes ``replication`` and ``backup``, moves
  use ``migration``. Work that cannot be slowed byte by byte (a pool scrub, which the kernel
  runs) takes ``budget.pacer(job_class)`` (``iobudget.Pacer``): told the bytes used, it
  answers how long to wait; pool scrubs use the class ``scrub`` (see
  ``dataplane/btrfs_scrub.py``). Foreground paths mark themselves (at most one Redis write
  a second per process, held two seconds): the checkpoint API's begin/commit/lease calls
  ``budget.foreground()``, the S3 gateway's object PUT and GET use
  ``iobudget.ForegroundMarker`` on the Redis URL the plane writes into its config
  (``io_budget_redis``). NFS and SMB traffic (Ganesha, smbd) does not mark itself.
- ``GET/PUT /api/v1/io-budget/1/`` ``{rate_mbps, burst_mb, class_rates_mbps,
  foreground_share}`` (0 = unlimited).
- ``POST /api/v1/tier-moves/ {filesystem|volume, pool}`` → 202 Job; ``GET
  /api/v1/tier-moves/`` the record. See ``moves.py`` for what a move does and refuses.
  After the switch a move sends ``signals.moved``; the file service re-points the moved
  file system's NFS exports and SMB shares (same pseudo path and share name). Nothing
  receives it for volumes yet: a volume served by the block service must not be moved.
"""

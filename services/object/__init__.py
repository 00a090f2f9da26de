"""The object service: Strata's S3 gateway (:mod:`.gateway`, no Django) and its management plane.

Plane modules (Django app label ``object``):

- :mod:`.models`: ``Gateway`` (one row: the file system holding the gateway's data, its admin
  token, region), ``Bucket`` (owner = S3 user name, quotas, versioning, usage as last
  reported), ``S3Key`` (access key, secret sealed with Fernet keyed from SECRET_KEY, S3 user,
  admin flag; ``system`` = the plane's own key).
- :mod:`.service`: all logic. Buckets go to the gateway through its admin interface
  (:mod:`.admin_client`) inside the row's transaction; keys go into the gateway's config file,
  re-rendered from the whole table after each commit under a file lock
  (:mod:`.gatewayconf`). Listings import buckets made or deleted over S3; the beat task
  ``object.reconcile_buckets`` (every 5 minutes) also re-applies quotas.
- :mod:`.api`: ``/api/v1/buckets/`` and ``/api/v1/s3-keys/`` (create answers the secret once,
  also as ``show_once``); :mod:`.pages` (console); :mod:`.cli` (``strata bucket``,
  ``strata s3-key``).
- `strata up`: :mod:`.up` adds ``--s3-port`` (default 9000) and ``--s3-host`` and runs the
  launcher :mod:`.serve`, which waits until :mod:`.bootstrap` has mounted the data root (file
  system ``s3`` on pool ``default``, made on the first start), written
  ``<data_dir>/run/s3/gateway.json`` and the ``run/s3/start`` gate, then execs the gateway.
  The bootstrap returns ``s3_endpoint``, ``s3_access_key``, ``s3_secret_key``, ``s3_region``
  for credentials.json.
- Capacity tier: when a pool of media ``capacity`` exists, the bootstrap makes file system
  ``s3-cold-<pool>`` on the first usable one by name (once) and the config gets its
  ``cold_root`` (rendered only while that pool is online and the directory exists), plus the
  I/O budget's Redis and rates (lifecycle transitions draw from class ``migration``; a budget
  change reaches the gateway with its next config write). Without it, lifecycle Transition
  rules are refused with ``InvalidStorageClass``. :mod:`.signals` refuses to delete the cold
  file system while object versions' cold bytes are on it, and re-renders the config when a
  capacity pool is created or its pool goes online or offline: a capacity pool made after
  `strata up` gives the running gateway its cold root at once.
- Bucket snapshots and the change feed live in the gateway (:mod:`.gateway.snapshots`, reached
  through :mod:`.admin_client`); the protection service drives them (``/api/v1/
  bucket-snapshots/``, ``bucket-replications/``, snapshot schedules of a bucket).
"""

"""The ``ceph`` driver: pools as RADOS pools on an existing Ceph cluster (scale-out).

A pool names its cluster (``ceph_conf`` path, ``client`` name, optional ``keyring``), a
CRUSH failure domain (``osd``, ``host`` or ``rack``) and its redundancy:

- ``replicated:N`` (``min_size`` default N - N//2, as Ceph's): one replicated RADOS pool
  ``<prefix><name>`` placed by a CRUSH rule ``strata-replicated-<domain>``;
- ``ec:K+M``: an erasure-code profile and pool ``<prefix><name>.data`` (overwrites on) for
  the bytes, plus the replicated pool ``<prefix><name>`` for RBD's metadata.

The legacy names ``none``, ``mirror`` and ``mirror3`` mean ``replicated:1/2/3``. Devices are
the cluster's OSDs: a pool takes none of its own. Bad input (unknown domain, more copies
than the cluster has domains, a conf path that does not exist, an EC profile the cluster
refuses) raises InvalidArgument / InsufficientDevices before anything is created; a cluster
that does not answer raises Unreachable.

Volumes are RBD images (``ceph_rbd.py``). File systems are directories of the cluster's
CephFS (``ceph_files.py`` over ``ceph_fs.py``), mounted with ceph-fuse at the pool's
mountpoint once the pool holds one; the snapshot, clone, rollback and stream methods of
``ceph_rbd.py`` hand ``kind="filesystem"`` to the ``fs_*`` methods of ``ceph_files.py``.

``pool_info`` reports the cluster's health for the pool: ``health`` is ``online`` (its PGs
active+clean), ``degraded`` (PGs degraded, undersized or recovering, or an OSD it uses
down) or ``offline`` (PGs inactive or the cluster unreachable); ``health_detail`` has
Ceph's status (HEALTH_OK/WARN/ERR), the reasons, the failed failure domains by name and the
recovery progress; ``devices`` are the OSDs with their failure domain and state.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from plumbing.atomic import write_json_atomic

from .cephfs import ROOT as CEPHFS_ROOT
from .filesystems import FS_CAPABILITIES, CephFilesMixin
from .rbd import CephRbdMixin
from ..driver import MEDIA, DeviceInfo, Driver, PoolInfo, recorded_pools, validate_name
from ..errors import (AlreadyExists, InsufficientDevices, InUse, InvalidArgument, NotFound,
                     Unreachable, Unsupported)

FAILURE_DOMAINS = ("osd", "host", "rack")
LEGACY_REDUNDANCY = {"none": "replicated:1", "mirror": "replicated:2",
                     "mirror3": "replicated:3"}
_REDUNDANCY_RE = re.compile(r"^(?:replicated:(\d{1,2})|ec:(\d{1,2})\+(\d{1,2}))$")
CONNECT_TIMEOUT = 5
RETRY_AFTER = 10.0    # seconds a failed connect is remembered before the next attempt


def parse_redundancy(text: str) -> dict:
    """``replicated:N`` or ``ec:K+M`` (or none/mirror/mirror3) as a dict, else InvalidArgument."""
    text = LEGACY_REDUNDANCY.get(text, text)
    m = _REDUNDANCY_RE.match(text if isinstance(text, str) else "")
    if not m:
        raise InvalidArgument(f"invalid redundancy {text!r} for a ceph pool: use "
                              "'replicated:N' (N copies) or 'ec:K+M' (erasure coding)")
    if m.group(1):
        size = int(m.group(1))
        if not 1 <= size <= 10:
            raise InvalidArgument(f"invalid redundancy {text!r}: 1 to 10 copies")
        return {"type": "replicated", "size": size, "text": f"replicated:{size}"}
    k, m_ = int(m.group(2)), int(m.group(3))
    if k < 2 or m_ < 1:
        raise InvalidArgument(f"invalid redundancy {text!r}: erasure coding needs K >= 2 "
                              "data chunks and M >= 1 coding chunks")
    return {"type": "ec", "k": k, "m": m_, "size": k + m_, "text": f"ec:{k}+{m_}"}


class _Connection:
    """One librados connection (per cluster, client and process), opened on first use."""

    def __init__(self, conf: str, client: str, keyring: Optional[str]):
        self.conf, self.client, self.keyring = conf, client, keyring
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.cluster = None
        self.failed: tuple[float, str] | None = None   # (when, why) the last connect failed

    def get(self):
        import rados     # optional: installations without Ceph never load it

        with self.lock:
            if self.cluster is None and self.failed is not None \
                    and time.monotonic() - self.failed[0] < RETRY_AFTER:
                # a cluster that is down answers nobody: every caller (a health check a
                # second) would wait out the connect again; say so at once for a while
                raise Unreachable(f"{self.failed[1]} (tried {time.monotonic() - self.failed[0]:.0f}"
                                  f" s ago; next try in at most {RETRY_AFTER:.0f} s)")
            if self.cluster is None:
                conf = {"rados_mon_op_timeout": "30", "client_mount_timeout": "15"}
                if self.keyring:
                    conf["keyring"] = self.keyring
                cluster = rados.Rados(conffile=self.conf, name=f"client.{self.client}",
                                      conf=conf)
                try:
                    cluster.connect(timeout=CONNECT_TIMEOUT)
                except (rados.Error, OSError) as exc:
                    try:
                        cluster.shutdown()
                    except Exception:
                        pass
                    why = (f"the Ceph cluster of {self.conf} (client.{self.client}) does not "
                           f"answer: {exc}")
                    self.failed = (time.monotonic(), why)
                    raise Unreachable(why) from exc
                self.cluster, self.failed = cluster, None
            return self.cluster

    def drop(self):
        with self.lock:
            if self.cluster is not None:
                try:
                    self.cluster.shutdown()
                except Exception:
                    pass
                self.cluster = None


class CephDriver(CephFilesMixin, CephRbdMixin, Driver):
    """Pools on Ceph clusters; RBD volumes with snapshots, clones and send streams.

    ``ceph_conf``, ``client`` and ``keyring`` are the defaults for pools created without
    naming a cluster (e.g. ``/etc/ceph/ceph.conf`` and ``admin``); ``pool_prefix`` starts
    the RADOS pool names (``strata.`` by default), so that several appliances or test runs
    can share a cluster.
    """

    name = "ceph"

    def __init__(self, state_dir, runner=None, ceph_conf: Optional[str] = None,
                 client: Optional[str] = None, keyring: Optional[str] = None,
                 pool_prefix: str = "strata."):
        super().__init__(state_dir, runner)
        self.default_cluster = {"ceph_conf": ceph_conf or os.environ.get("CEPH_CONF")
                                or "/etc/ceph/ceph.conf", "client": client or "admin",
                                "keyring": keyring}
        self.pool_prefix = pool_prefix
        self._connections: dict = {}

    # -- capabilities ------------------------------------------------------------------
    def capabilities(self) -> dict:
        """What the ceph driver does, as data."""
        return {
            "driver": self.name,
            "redundancy": ["replicated:N", "ec:K+M"],
            "failure_domains": list(FAILURE_DOMAINS),
            "media": list(MEDIA), "instant_snapshots": True,
            "readonly_snapshots": True, "send_receive": True, "scrub": False,
            "volumes": True, "clones": True, **FS_CAPABILITIES,
            "clones_depend_on_snapshot": True, "block_devices": False,
            "image_devices": False, "thin_provisioning": True, "rollback": True,
            # VolumeInfo.path is qemu's rbd filename: rbd:POOL/IMAGE:id=CLIENT:conf=PATH
            "volume_paths": "rbd",
            "exports": ["iscsi", "nbd", "vhost-user-blk"],
            "features_off": {
                "scrub": "Ceph scrubs its placement groups itself (osd_scrub_* settings, "
                         "'ceph pg deep-scrub'); Strata does not drive it",
            },
        }

    # -- cluster connections -----------------------------------------------------------
    def _conn(self, rec: dict):
        key = (rec["ceph_conf"], rec["client"], rec.get("keyring"), os.getpid())
        conn = self._connections.get(key)
        if conn is None:
            conn = self._connections[key] = _Connection(rec["ceph_conf"], rec["client"],
                                                        rec.get("keyring"))
        return conn.get()

    def _mon(self, rec: dict, prefix: str, **args):
        """A mon command's JSON answer; InvalidArgument with Ceph's message if refused."""
        cluster = self._conn(rec)
        cmd = json.dumps({"prefix": prefix, "format": "json", **args})
        ret, out, err = cluster.mon_command(cmd, b"", timeout=30)
        if ret == -110:     # ETIMEDOUT
            raise Unreachable(f"the Ceph cluster of {rec['ceph_conf']} did not answer "
                              f"'{prefix}' in time")
        if ret != 0:
            raise CephRefused(prefix, ret, err)
        return json.loads(out) if out.strip() else {}

    @contextmanager
    def _ioctx(self, rec: dict, pool: Optional[str] = None):
        """An I/O context on the pool's RADOS pool (its metadata pool for EC), closed after."""
        import rados

        try:
            ioctx = self._conn(rec).open_ioctx(pool or rec["rados_pool"])
        except rados.ObjectNotFound:
            raise NotFound(f"RADOS pool {pool or rec['rados_pool']!r} of pool {rec['name']!r} "
                           "is gone from the cluster") from None
        try:
            yield ioctx
        finally:
            ioctx.close()

    # -- records -----------------------------------------------------------------------
    def _record_path(self, pool: str) -> Path:
        return self.pools_dir / f"{pool}.json"

    def _load(self, pool: str) -> dict:
        validate_name(pool, "pool name")
        try:
            rec = json.loads(self._record_path(pool).read_text())
        except FileNotFoundError:
            raise NotFound(f"pool {pool!r} does not exist") from None
        if rec.get("driver") != self.name:
            raise NotFound(f"pool {pool!r} does not exist in the ceph driver")
        return rec

    def _save(self, pool: str, rec: dict) -> None:
        write_json_atomic(self._record_path(pool), rec, mode=0o600, indent=2, sort_keys=True)

    def list_pools(self) -> list:
        """Names of the pools this driver has records for."""
        return recorded_pools(self.pools_dir, self.name)

    # -- pools -------------------------------------------------------------------------
    def create_pool(self, name, devices=None, redundancy="replicated:3", media="flash", *,
                    ceph_conf: Optional[str] = None, client: Optional[str] = None,
                    keyring: Optional[str] = None, failure_domain: str = "host",
                    min_size: Optional[int] = None, pg_num: Optional[int] = None) -> PoolInfo:
        """Create the RADOS pool(s) and CRUSH rule; nothing is left behind on failure."""
        validate_name(name, "pool name")
        if devices:
            raise InvalidArgument("a ceph pool is placed on the cluster's OSDs by CRUSH: "
                                  "give no devices")
        if media not in MEDIA:
            raise InvalidArgument(f"invalid media {media!r}: use one of {', '.join(MEDIA)}")
        if failure_domain not in FAILURE_DOMAINS:
            raise InvalidArgument(f"unknown failure domain {failure_domain!r}: use one of "
                                  f"{', '.join(FAILURE_DOMAINS)}")
        red = parse_redundancy(redundancy)
        if min_size is not None:
            if isinstance(min_size, bool) or not isinstance(min_size, int) or not (
                    1 <= min_size <= red["size"]):
                raise InvalidArgument(f"min_size {min_size!r} must be 1..{red['size']} for "
                                      f"{red['text']}")
        if pg_num is not None and (not isinstance(pg_num, int) or not 1 <= pg_num <= 32768):
            raise InvalidArgument(f"invalid pg_num {pg_num!r}: 1..32768")
        conf = ceph_conf or self.default_cluster["ceph_conf"]
        if not os.path.isfile(conf):
            raise InvalidArgument(f"Ceph configuration {conf!r} does not exist")
        client = client or self.default_cluster["client"]
        if not re.match(r"^[A-Za-z0-9._-]{1,64}$", client or ""):
            raise InvalidArgument(f"invalid Ceph client name {client!r} (e.g. 'strata' for "
                                  "client.strata)")
        keyring = keyring or (self.default_cluster["keyring"] if not ceph_conf else None)
        if keyring and not os.path.isfile(keyring):
            raise InvalidArgument(f"keyring {keyring!r} does not exist")
        if self._record_path(name).exists():
            raise AlreadyExists(f"pool {name!r} already exists")
        rados_pool = f"{self.pool_prefix}{name}"
        rec = {"name": name, "driver": self.name, "ceph_conf": str(Path(conf).absolute()),
               "client": client, "keyring": keyring and str(Path(keyring).absolute()),
               "failure_domain": failure_domain, "redundancy": red["text"], "media": media,
               "rados_pool": rados_pool, "data_pool": None, "ec_profile": None,
               "crush_rule": None, "min_size": min_size, "created": time.time()}
        domains = self._domains(rec)
        if red["size"] > len(domains):
            raise InsufficientDevices(
                f"{red['text']} needs {red['size']} {failure_domain}s as failure domains; "
                f"the cluster has {len(domains)}"
                + (f" ({', '.join(sorted(domains))})" if domains else ""))
        existing = {p["pool_name"] for p in self._mon(rec, "osd pool ls", detail="detail")}
        if rados_pool in existing or f"{rados_pool}.data" in existing:
            raise AlreadyExists(f"the cluster already has a RADOS pool {rados_pool!r} "
                                "(another Strata's pool?)")
        made = []
        try:
            rule = f"strata-replicated-{failure_domain}"
            rules = set(self._mon(rec, "osd crush rule ls"))
            if rule not in rules:
                self._mon(rec, "osd crush rule create-replicated", name=rule, root="default",
                          type=failure_domain)
            rec["crush_rule"] = rule
            meta_size = red["size"] if red["type"] == "replicated" else min(3, len(domains))
            self._create_rados_pool(rec, rados_pool, "replicated", rule=rule, pg_num=pg_num)
            made.append(rados_pool)
            self._set(rec, rados_pool, "size", meta_size)
            self._set(rec, rados_pool, "min_size",
                      min_size if (min_size and red["type"] == "replicated")
                      else meta_size - meta_size // 2)
            if red["type"] == "ec":
                profile = f"{rados_pool}.ec"
                self._mon(rec, "osd erasure-code-profile set", name=profile,
                          profile=[f"k={red['k']}", f"m={red['m']}",
                                   f"crush-failure-domain={failure_domain}"], force=True)
                rec["ec_profile"] = profile
                data_pool = f"{rados_pool}.data"
                self._create_rados_pool(rec, data_pool, "erasure", profile=profile,
                                        pg_num=pg_num)
                made.append(data_pool)
                rec["data_pool"] = data_pool
                self._set(rec, data_pool, "allow_ec_overwrites", "true")
                if min_size:
                    self._set(rec, data_pool, "min_size", min_size)
            for pool in made:
                self._mon(rec, "osd pool application enable", pool=pool, app="rbd")
            self._wait_active(rec, made)
        except BaseException:
            for pool in reversed(made):
                self._delete_rados_pool(rec, pool, quiet=True)
            if rec.get("ec_profile"):
                self._quiet(rec, "osd erasure-code-profile rm", name=rec["ec_profile"])
            raise
        self._save(name, rec)
        return self.pool_info(name)

    def _create_rados_pool(self, rec, pool, kind, rule=None, profile=None, pg_num=None):
        args = {"pool": pool, "pool_type": kind}
        if pg_num:
            args.update(pg_num=pg_num, pgp_num=pg_num)
        if rule:
            args["rule"] = rule
        if profile:
            args["erasure_code_profile"] = profile
        try:
            self._mon(rec, "osd pool create", **args)
        except CephRefused as exc:
            raise InvalidArgument(f"the cluster refused pool {pool!r} ({kind}"
                                  f"{', profile ' + profile if profile else ''}): "
                                  f"{exc.message}") from None

    def _set(self, rec, pool, var, val):
        self._mon(rec, "osd pool set", pool=pool, var=var, val=str(val))

    def _quiet(self, rec, prefix, **args):
        try:
            self._mon(rec, prefix, **args)
        except Exception:
            pass

    def _delete_rados_pool(self, rec, pool, quiet=False):
        try:
            self._mon(rec, "osd pool rm", pool=pool, pool2=pool,
                      yes_i_really_really_mean_it=True)
        except CephRefused as exc:
            if not quiet:
                raise InUse(f"the cluster refused to delete RADOS pool {pool!r}: "
                            f"{exc.message} (set mon_allow_pool_delete=true)") from None

    def _wait_active(self, rec, pools, timeout=60):
        """Wait until the new pools' PGs are active (images can be made at once)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:        # answered by the mgr, which may lag behind a new pool
                got = [self._mon(rec, "pg ls-by-pool", poolstr=pool) for pool in pools]
                in_df = {p["name"] for p in self._mon(rec, "df")["pools"]}
            except Unreachable:
                continue
            states = [pg["state"] for g in got for pg in g.get("pg_stats", [])]
            if (all(g.get("pg_ready", True) for g in got) and states
                    and all("active" in s for s in states) and set(pools) <= in_df):
                return
            time.sleep(0.25)
        raise Unreachable(f"the PGs of {', '.join(pools)} are not active after {timeout} s: "
                          "is the cluster healthy?")

    def _pgs(self, rec, pool) -> list:
        got = self._mon(rec, "pg ls-by-pool", poolstr=pool)
        return got.get("pg_stats", []) if isinstance(got, dict) else got

    def _domains(self, rec) -> dict:
        """Failure-domain buckets of the pool's type that hold OSDs: name -> [osd ids]."""
        return _domains_of(self._mon(rec, "osd tree")["nodes"], rec["failure_domain"])

    def activate_pool(self, name) -> PoolInfo:
        """Check the cluster answers and the pool exists; mount its file systems' directory
        when it has one."""
        self._files_activate(name)
        return self.pool_info(name)

    def deactivate_pool(self, name) -> None:
        """Close this process's connection to the pool's cluster (and unmount its file
        systems); data stays in Ceph."""
        rec = self._load(name)
        self._files_deactivate(rec)
        for key, conn in list(self._connections.items()):
            if key[0] == rec["ceph_conf"] and key[1] == rec["client"]:
                conn.drop()

    # -- keys for the cluster's nodes ---------------------------------------------------
    def node_key(self, pool: str, entity: str) -> str:
        """The keyring entry (``[client.X]`` and its key) of cephx ``entity`` for a cluster
        node's daemons on ``pool``: RBD on the pool's RADOS pools (``profile rbd``), read
        and write of its CephFS data pool, the MDS below the pool's own directory only
        (``/strata/<pool>``: FSAL_CEPH and ceph-fuse mount there, and another pool's file
        systems stay out of reach) and the monitors as an RBD client (``profile rbd``:
        reads, and blocklisting a dead peer's watch); no administration. Made once; its caps
        follow the pool (a CephFS data pool added later)."""
        rec = self._load(pool)
        osd = [f"profile rbd pool={p}" for p in (rec["rados_pool"], rec.get("data_pool")) if p]
        if rec.get("fs_pool"):
            osd.append(f"allow rw pool={rec['fs_pool']}")
        # mon: reads of every map (a CephFS client waits for the FS map, which "profile rbd"
        # alone does not let it read), and what an RBD client may do (blocklisting)
        caps = ["mon", "allow r, profile rbd", "osd", ", ".join(osd),
                "mds", f"allow rw path={CEPHFS_ROOT}/{pool}"]
        try:
            answer = self._mon(rec, "auth get-or-create", entity=entity, caps=caps)
        except CephRefused:              # it exists with other caps: the pool changed since
            self._mon(rec, "auth caps", entity=entity, caps=caps)
            answer = self._mon(rec, "auth get", entity=entity)
        return f"[{entity}]\n\tkey = {answer[0]['key']}\n"

    def rados_pool(self, pool: str) -> str:
        """The pool's own (replicated) RADOS pool, where small shared records may live: the
        NFS servers' grace database, in a namespace of its own (the node keys' ``profile
        rbd`` on it lets them read and write there)."""
        return self._load(pool)["rados_pool"]

    def revoke_node_key(self, pool: str, entity: str) -> None:
        """Remove ``entity`` from the pool's cluster (nothing when it is gone)."""
        try:
            self._mon(self._load(pool), "auth rm", entity=entity)
        except (CephRefused, NotFound):
            pass

    def destroy_pool(self, name) -> None:
        """Delete an empty pool: its RADOS pool(s), EC profile and record."""
        rec = self._load(name)
        images = self.list_volumes(name)
        if images:
            raise InUse(f"pool {name!r} still holds volumes: {', '.join(images)}; delete "
                        "them first")
        self._files_destroy(rec)
        for pool in (rec.get("data_pool"), rec["rados_pool"]):
            if pool:
                self._delete_rados_pool(rec, pool)
        if rec.get("ec_profile"):
            self._quiet(rec, "osd erasure-code-profile rm", name=rec["ec_profile"])
        self._record_path(name).unlink(missing_ok=True)

    def pool_attached(self, name) -> bool:
        """Whether a pool with file systems has its live ceph-fuse mount (the cluster's own
        health is :meth:`pool_info`'s)."""
        return self._files_mount_problem(self._load(name)) is None

    def pool_info(self, name) -> PoolInfo:
        """Capacity from ``ceph df``, health from the pool's PGs and the cluster's checks;
        ``offline`` too while a pool with file systems has no live ceph-fuse mount."""
        rec = self._load(name)
        base = dict(name=name, driver=self.name, mountpoint=self._files_pool_mountpoint(rec),
                    redundancy=rec["redundancy"],
                    media=rec["media"], features_off=self.capabilities()["features_off"])
        try:
            info = PoolInfo(**base, **self._live_state(rec))
        except Unreachable as exc:
            info = PoolInfo(**base, size_bytes=0, used_bytes=0, free_bytes=0,
                            health="offline",
                            health_detail={"status": "unreachable", "reasons": [str(exc)],
                                           "failed_domains": []})
        problem = self._files_mount_problem(rec)
        if problem:
            # the cluster may be fine, but what the services use of the pool is not there
            info.health = "offline"
            info.health_detail.setdefault("reasons", []).insert(0, problem)
            info.health_detail["unmounted"] = True
        return info

    def _live_state(self, rec) -> dict:
        pools = [p for p in (rec["rados_pool"], rec.get("data_pool"), rec.get("fs_pool")) if p]
        df = {p["name"]: p["stats"] for p in self._mon(rec, "df")["pools"]}
        if rec["rados_pool"] not in df:
            raise NotFound(f"RADOS pool {rec['rados_pool']!r} of pool {rec['name']!r} is gone "
                           "from the cluster")
        data = df[pools[-1]]
        used = sum(df[p]["stored"] for p in pools if p in df)
        free = data["max_avail"]
        tree = self._mon(rec, "osd tree")["nodes"]
        sizes = {o["id"]: o["kb"] * 1024 for o in self._mon(rec, "osd df")["nodes"]}
        domain_of = {osd: dom for dom, osds in _domains_of(tree, rec["failure_domain"]).items()
                     for osd in osds}
        devices, failed = [], []
        for node in tree:
            if node["type"] != "osd":
                continue
            up = node.get("status") == "up"
            inn = node.get("reweight", 0) > 0
            dom = domain_of.get(node["id"], "none")
            devices.append(DeviceInfo(path=node["name"], backing=_host_of(tree, node["id"]),
                                      fault_domain=dom, size_bytes=sizes.get(node["id"], 0),
                                      state="online" if up and inn else
                                      ("out" if up else "missing")))
            if not up and dom not in failed:
                failed.append(dom)
        states = [pg["state"] for p in pools for pg in self._pgs(rec, p)]
        health = self._mon(rec, "health", detail="detail")
        reasons = [f"{c['summary']['message']}" for c in health.get("checks", {}).values()]
        for dev in devices:
            if dev.state != "online":
                reasons.insert(0, f"{dev.path} ({rec['failure_domain']} {dev.fault_domain}) "
                                  f"is {'down' if dev.state == 'missing' else 'out'}")
        stats = self._mon(rec, "osd pool stats")
        recovery = {}
        for p in stats:
            if p["pool_name"] in pools:
                for key, val in p.get("recovery", {}).items():
                    recovery[key] = recovery.get(key, 0) + val if isinstance(val, (int, float)) \
                        else val
                for key, val in p.get("recovery_rate", {}).items():
                    recovery[key] = recovery.get(key, 0) + val
        if recovery.get("degraded_total"):
            recovery["progress_pct"] = round(
                100.0 * (1 - recovery.get("degraded_objects", 0) / recovery["degraded_total"]),
                1)
        counts: dict = {}
        for s in states:
            counts[s] = counts.get(s, 0) + 1
        if any("active" not in s for s in states) or not states:
            state = "offline"
        elif all(s == "active+clean" for s in states) and not failed:
            state = "online"
        else:
            state = "degraded"
        return dict(size_bytes=used + free, used_bytes=used, free_bytes=free, health=state,
                    devices=devices,
                    health_detail={"status": health.get("status", "HEALTH_ERR"),
                                   "reasons": reasons, "failed_domains": failed,
                                   "failure_domain": rec["failure_domain"],
                                   "pg_states": counts, "recovery": recovery})

    def scrub_pool(self, name, progress=None, should_cancel=None, throttle=None):
        """Not driven by Strata: Ceph scrubs its placement groups itself."""
        self._load(name)
        raise Unsupported(self.capabilities()["features_off"]["scrub"])


class CephRefused(InvalidArgument):
    """The cluster refused a command (its errno and message)."""

    def __init__(self, prefix: str, ret: int, message: str):
        self.ret, self.message = ret, (message or os.strerror(-ret)).strip()
        super().__init__(f"the Ceph cluster refused '{prefix}': {self.message}")


def _domains_of(tree: list, kind: str) -> dict:
    """Buckets of type ``kind`` holding OSDs (``osd``: each OSD) -> their OSD ids."""
    by_id = {n["id"]: n for n in tree}
    found: dict = {}
    for node in tree:
        if kind == "osd" and node["type"] == "osd":
            found[node["name"]] = [node["id"]]
        elif node["type"] == kind:
            osds, todo = [], list(node.get("children", []))
            while todo:
                child = by_id.get(todo.pop())
                if child is None:
                    continue
                if child["type"] == "osd":
                    osds.append(child["id"])
                else:
                    todo.extend(child.get("children", []))
            if osds:
                found[node["name"]] = osds
    return found


def _host_of(tree: list, osd_id: int) -> Optional[str]:
    for node in tree:
        if node["type"] == "host" and osd_id in node.get("children", []):
            return node["name"]
    return None

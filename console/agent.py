"""`strata node run`: the node agent (no Django here).

Every :data:`HEARTBEAT_EVERY` seconds it tells the plane (``POST /api/v1/nodes/heartbeat/``,
with the node's own credential) the state of each daemon it supervises, and the plane answers
what the node should run: the services assigned to it and their options. The agent starts
each assigned service's daemons with the same ``up.py`` renderers and the same
:class:`console.supervisor.Supervisor` as `strata up` (restart with back-off; after a start
or restart the service's ``reconcile()`` re-applies what the database says, run as
``manage.py strata_reconcile`` against the cluster's database), and stops the daemons of a
service taken away (a drain). Heartbeats go from a thread of their own,
so that a daemon's slow start or a long reconcile never silences the node (the plane writes a
node down after 15 s without one, and fences its Ceph clients). A plane that cannot be
reached is retried; a credential the plane refuses (the node was removed) stops the agent with
that reason. A node the plane fenced (written down while it was only paused or cut off: its
CephFS sessions evicted, so its Ganesha's client blocklisted) restarts its file daemons when
the heartbeat's answer shows the fence.

Floating data addresses: once any node of the cluster has one, the agent runs keepalived
(supervised as the other daemons, group ``vrrp``) with the configuration
:mod:`plumbing.keepalived` makes from the cluster's nodes (``GET nodes/self/vrrp/``, fetched
again whenever the revision moves), written to ``<data dir>/run/vrrp/keepalived.conf`` and
reloaded with SIGHUP when it changes; taking another node's address over runs
``services.file.takeover`` (NFS grace for that node's clients at once; the agent gives that
grace up itself 75 s later if the plane did not, :meth:`Agent.lift_taken_over_graces`). The
data daemons then listen on every address of the
node (``file_bind`` and ``s3_host`` 0.0.0.0, unless the node's options say otherwise), so that
a floating address that lands here is served at once.

S3 (RADOS store, `strata plane --s3-store rados`): a node assigned ``object`` fetches its
gateway's config (``GET nodes/self/s3/``, with its own cephx key of the pool) and writes it
0600 to ``<data dir>/run/s3/gateway.json``, again whenever the revision moves (the plane
moves it when the keys change); its gateway serves the cluster's buckets on the data address.

Under `strata up` (single host) the agent only reports: `strata up` supervises the daemons
and the agent heartbeats for them (``report_only``, states from ``run/daemons.json``).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from console.daemons import read_states
from plumbing import keepalived, nodeceph
from plumbing.atomic import write_if_changed, write_json_atomic
from console.supervisor import (Supervisor, _claim, _sweep, service_up_modules,
                                DAEMON_START_TIMEOUT)
from plumbing.process import ChildFailed
from plumbing.workclass import read_shares
from plumbing.restclient import ApiError, RestClient
from services.file import takeover
from services.file.runtime.errors import CommandError
from services.object import gatewayconf

HEARTBEAT_EVERY = 5.0
WATCH_POLL = 0.2
DEFAULT_CONFIG = "/etc/strata/node.json"
DEFAULT_DATA_DIR = "/var/lib/strata"
# where the data daemons listen while the cluster has floating addresses: every address
WILDCARD_BINDS = {"file_bind": "0.0.0.0", "s3_host": "0.0.0.0"}
# what keepalived runs with the owner's name when this node takes another node's floating
# address over (NFS grace for the owner's clients at once) or gives it back
TAKEOVER = takeover.__name__


class CredentialRevoked(Exception):
    """The plane refused the node's credential: the node was removed."""


def version() -> str:
    try:
        from importlib.metadata import version as dist_version  # only for the heartbeat
        return dist_version("strata")
    except Exception:   # not installed as a distribution (a checkout): no version to tell
        return ""


def load_config(path: str | Path) -> dict:
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SystemExit(f"strata node: {path} does not exist; join first (`strata node "
                         "join --plane URL --token TOKEN ...`)") from None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"strata node: cannot read {path}: {exc}") from None
    missing = [k for k in ("plane_url", "name", "credential") if not config.get(k)]
    if missing:
        raise SystemExit(f"strata node: {path} lacks {', '.join(missing)}; join again")
    return config


def plane_client(config: dict, timeout: float = 10.0) -> RestClient:
    return RestClient(config["plane_url"], config["credential"], timeout=timeout,
                      verify=config.get("ca_bundle") or None)


class Agent:
    """One node's agent: heartbeats and the reconcile of its assigned daemons."""

    def __init__(self, config: dict, data_dir: Path, report_only: bool = False):
        self.config, self.data, self.report_only = config, Path(data_dir).resolve(), report_only
        self.client = plane_client(config)
        self.services: list[str] = []     # the services whose daemons run here
        self.options: dict = {}
        self.revision: int | None = None  # the plane's placement revision last reconciled
        self.stopping = False
        self.unreachable_since: float | None = None
        self.sup: Supervisor | None = None
        self.answer: dict | None = None   # the plane's latest answer, not applied yet
        self.revoked: CredentialRevoked | None = None
        self.vrrp: dict = {}                # keepalived's configuration ({}: not running)
        self.s3_pending = True              # the S3 gateway's config is to be fetched
        self.fenced: str | None = None      # the plane's last fence of this node (None: unseen)
        self.woken = threading.Event()
        self.next_lift = 0.0                # when to look at this node's takeovers again

    def env(self) -> dict:
        """The environment of the daemons and the reconcile steps: the cluster's database,
        broker and sealing key, this node's name and data directory."""
        c = self.config
        env = dict(os.environ, STRATA_DATA_DIR=str(self.data), PYTHONUNBUFFERED="1",
                   DJANGO_SETTINGS_MODULE="console.settings", STRATA_NODE_NAME=c["name"],
                   STRATA_NODE_AGENT="" if self.report_only else "1")
        for key, var in (("database_url", "STRATA_DATABASE_URL"),
                         ("redis_url", "STRATA_REDIS_URL"), ("secret_key", "STRATA_SECRET_KEY")):
            if c.get(key):
                env[var] = c[key]
        return env

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        for sub in ("run", "log"):
            (self.data / sub).mkdir(parents=True, exist_ok=True)
        run = None if self.report_only else _claim(self.data)
        self.sup = Supervisor(self.data, self.env())
        self.sup.reconcile_argv = [sys.executable, "-m", "django", "strata_reconcile"]
        if not self.report_only:      # the classes of work's cgroups, as `strata up` makes them
            self.sup.classes.apply(read_shares(self.data))

        def on_signal(signum, frame):
            self.stopping = self.sup.stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        print(f"strata node: {self.config['name']} reporting to {self.config['plane_url']} "
              f"every {HEARTBEAT_EVERY:.0f} s", flush=True)
        code = 0
        began = time.monotonic()
        beats = threading.Thread(target=self.beat, name="heartbeat", daemon=True)
        beats.start()
        try:
            while not self.stopping:
                if self.revoked is not None:
                    raise self.revoked
                answer, self.answer = self.answer, None
                if answer is not None and not self.report_only:
                    self.follow(answer)
                if not self.report_only and not self.sup.watch_once():
                    code = 0 if self.stopping else 1   # a child's exit while stopping: no failure
                    break
                if not self.report_only and time.monotonic() >= self.next_lift:
                    self.next_lift = time.monotonic() + HEARTBEAT_EVERY
                    self.lift_taken_over_graces()
                time.sleep(WATCH_POLL)
        except CredentialRevoked as exc:
            print(f"strata node: {exc}", file=sys.stderr, flush=True)
            code = 1
        finally:
            began = time.monotonic()
            self.woken.set()
            self.sup.stop_all()
            if run is not None:
                _sweep(run, self.sup, began)
                self.sup.classes.remove()
        return code

    def beat(self) -> None:
        """The heartbeat thread: a beat every HEARTBEAT_EVERY seconds whatever the main loop
        is doing (starting daemons, a reconcile), since a node silent for 15 s is written
        down and its Ceph clients fenced; the answer is left for the main loop to apply."""
        while not self.stopping:
            try:
                answer = self.heartbeat()
            except CredentialRevoked as exc:
                self.revoked = exc
                return
            except Exception as exc:     # a bug here must not silence the node: it would be fenced
                print(f"strata node: heartbeat not sent: {exc.__class__.__name__}: {exc}",
                      flush=True)
                answer = None
            if answer is not None:
                self.answer = answer
            self.woken.wait(HEARTBEAT_EVERY)

    def daemon_states(self) -> dict:
        if self.report_only:
            states = read_states(self.data)
        else:
            states = {s.child.name: s.record() for s in list(self.sup.children)}
        return {name: {k: d.get(k) for k in ("state", "pid", "restarts", "last_exit",
                                            "started_at")} for name, d in states.items()}

    def heartbeat(self) -> dict | None:
        """Send one heartbeat; the plane's answer, or None when it cannot be reached."""
        try:
            answer = self.client.post("nodes/heartbeat/", {
                "daemons": self.daemon_states(), "version": version()})
        except ApiError as exc:
            if exc.status == 401:
                raise CredentialRevoked(
                    f"the plane refused node {self.config['name']}'s credential "
                    f"({exc.detail}); it was removed from the cluster: join it again with a "
                    "new token to bring it back") from None
            if self.unreachable_since is None:
                self.unreachable_since = time.monotonic()
                print(f"strata node: heartbeat failed: {exc}; retrying every "
                      f"{HEARTBEAT_EVERY:.0f} s", flush=True)
            return None
        if self.unreachable_since is not None:
            print(f"strata node: the plane answers again (after "
                  f"{time.monotonic() - self.unreachable_since:.0f} s)", flush=True)
            self.unreachable_since = None
        return answer

    # --- what runs here ---------------------------------------------------------------------

    def follow(self, answer: dict) -> None:
        """Do what the heartbeat's answer says: the Ceph client files and the services'
        daemons on the first answer and whenever the placement revision moved (then every
        running service reconciles again: an export added, a volume moved here)."""
        revision = answer.get("revision")
        moved = revision != self.revision
        if moved:
            self.fetch_ceph_files()
            self.follow_vrrp()
        self.restart_fenced(answer.get("fenced") or "")
        options = answer.get("options") or {}
        self.keep_nfs_cluster(options.get("nfs_cluster"))
        if self.vrrp:
            options = {**WILDCARD_BINDS, **options}
        started = set(self.services)
        self.apply(answer.get("services") or [], options)
        if "object" in self.services and (moved or self.s3_pending or
                                          not gatewayconf.gate_path(self.data).exists()):
            self.s3_pending = not self.follow_s3()
        if moved and self.revision is not None:
            for service in [s for s in self.services if s in started]:
                self.sup.run_quietly(f"reconcile-{service}",
                                     self.sup.reconcile_argv + [service])
        self.revision = revision

    def restart_fenced(self, fenced: str) -> None:
        """The plane fenced this node's CephFS clients (evicted, so blocklisted: it wrote the
        node down while it was paused or cut off) since the agent last looked: the file
        service's daemons (Ganesha) hold a client that serves nothing any more; they are
        stopped here and :meth:`apply` starts them again with fresh ones."""
        if self.fenced is not None and fenced != self.fenced and "file" in self.services:
            print(f"strata node: the plane fenced this node's Ceph clients ({fenced}); "
                  "restarting the file service's daemons with fresh ones", flush=True)
            self.sup.stop_group("file")
            self.services.remove("file")
        self.fenced = fenced

    def lift_taken_over_graces(self) -> None:
        """The NFS grace of a node whose floating address this node took over, given up once
        the MDS has closed the dead server's sessions, when the plane did not (it is down):
        :func:`services.file.takeover.lift_due`."""
        try:
            lifted = takeover.lift_due(self.data)
        except (CommandError, OSError, ValueError) as exc:   # Ceph did not answer: next time
            print(f"strata node: the NFS grace of a node taken over could not be given up: "
                  f"{exc}", flush=True)
            return
        if lifted:
            print(f"strata node: NFS grace of {', '.join(lifted)} given up "
                  f"{takeover.LIFT_AFTER:.0f} s after taking its address over (the plane "
                  "did not)", flush=True)

    def fetch_ceph_files(self) -> None:
        """What the daemons need to open the cluster's Ceph pools, from the plane (node
        credential), written 0600 under ``<data dir>/ceph/<pool>/``."""
        try:
            answer = self.client.get("nodes/self/ceph/")
        except ApiError as exc:
            print(f"strata node: the Ceph client files could not be fetched: {exc}",
                  flush=True)
            return
        for pool, files in (answer.get("pools") or {}).items():
            if nodeceph.write_pool(self.data, pool, files):
                print(f"strata node: Ceph client files of pool {pool} written", flush=True)
        for pool, error in (answer.get("errors") or {}).items():
            print(f"strata node: pool {pool}: {error}", flush=True)
        nodeceph.forget_others(self.data, list(answer.get("pools") or {}) +
                               list(answer.get("errors") or {}))

    def follow_s3(self) -> bool:
        """The S3 gateway's config from the plane (RADOS store: every node assigned
        ``object`` serves the same buckets), with this node's Ceph client files of the pool
        (:meth:`fetch_ceph_files`) and a local data root for its run and temporary files;
        written 0600 (the gateway re-reads it when it changes), then the launcher's gate
        opened. False when it could not be done (tried again at the next heartbeat)."""
        try:
            config = self.client.get("nodes/self/s3/")["config"]
        except ApiError as exc:
            print(f"strata node: the S3 gateway's config could not be fetched: {exc}",
                  flush=True)
            return False
        store = dict(config.get("store") or {})
        pool = store.pop("ceph_pool", "")
        files = nodeceph.read_pool(self.data, pool)
        if files is None:
            print(f"strata node: no Ceph client files of pool {pool} yet; S3 waits for them",
                  flush=True)
            return False
        store.update(ceph_conf=files["conf"], keyring=files["keyring"], client=files["client"])
        root = gatewayconf.rados_data_root(self.data)
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = gatewayconf.config_path(self.data)
        with gatewayconf.locked(path):
            if gatewayconf.write_config(path, {**config, "store": store,
                                               "data_root": str(root)}):
                print(f"strata node: S3 gateway config written (RADOS pool {store['pool']})",
                      flush=True)
        gate = gatewayconf.gate_path(self.data)
        if not gate.exists():
            write_json_atomic(gate, {"data_root": str(root)})
        return True

    def keep_nfs_cluster(self, grace: dict | None) -> None:
        """Where this node's Ganesha is a member of the NFS grace database (the plane's
        ``nfs_cluster`` option), for keepalived's takeover command
        (``services.file.takeover``); removed while it is none."""
        path = takeover.state_path(self.data)
        if grace:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_if_changed(path, json.dumps(grace, sort_keys=True), mode=0o600)
        else:
            path.unlink(missing_ok=True)

    def follow_vrrp(self) -> None:
        """keepalived for the cluster's floating addresses: started when the first one
        appears, reloaded (SIGHUP) when its configuration changed, stopped when none is
        left. A plane that cannot be reached leaves it as it is."""
        try:
            members = self.client.get("nodes/self/vrrp/")["members"]
        except ApiError as exc:
            print(f"strata node: the floating addresses could not be fetched: {exc}",
                  flush=True)
            return
        run = self.data / "run" / "vrrp"
        try:
            conf = self.vrrp_config(members)
        except (OSError, subprocess.SubprocessError) as exc:   # a name that does not resolve
            print(f"strata node: the floating addresses' configuration failed: {exc}",
                  flush=True)
            return
        if not conf:
            if self.vrrp:
                print("strata node: no floating address left; keepalived stopped", flush=True)
                self.sup.stop_group("vrrp")
            self.vrrp = {}
            return
        binary = shutil.which("keepalived") or shutil.which("keepalived", path="/usr/sbin")
        if binary is None:
            print("strata node: the cluster has floating addresses but keepalived is not "
                  "installed (Debian package keepalived); they stay off this node", flush=True)
            return
        run.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = run / keepalived.CONFIG_NAME
        candidate = run / f"{keepalived.CONFIG_NAME}.new"
        write_if_changed(candidate, keepalived.render(conf), mode=0o600)
        problem = keepalived.check(binary, str(candidate))
        if problem:
            print(f"strata node: keepalived refuses its configuration, left as it was: "
                  f"{problem}", flush=True)
            return
        changed = write_if_changed(path, candidate.read_text(), mode=0o600)
        running = next((s.child for s in self.sup.children if s.group == "vrrp"), None)
        if running is None:
            self.sup.start("keepalived", keepalived.argv(binary, str(path), str(run)),
                           group="vrrp")
            print(f"strata node: keepalived started for "
                  f"{len(conf['vrrp_instance'])} floating address(es)", flush=True)
        elif changed and running.proc is not None and running.proc.poll() is None:
            running.proc.send_signal(signal.SIGHUP)
            print("strata node: keepalived reloaded (floating addresses changed)", flush=True)
        self.vrrp = conf

    def vrrp_config(self, members: list[dict]) -> dict:
        """keepalived's configuration for this node from the cluster's ``members``."""
        if not any(m.get("floating_address") for m in members):
            return {}
        members = [{**m, "data_address": keepalived.ipv4_of(m["data_address"])}
                   for m in members]
        own = next((m for m in members if m["name"] == self.config["name"]), None)
        if own is None:
            return {}
        interface = keepalived.interface_of(own["data_address"])
        if not interface:
            print(f"strata node: no interface carries the data address "
                  f"{own['data_address']}; floating addresses stay off this node", flush=True)
            return {}
        if not self.config.get("secret_key"):
            print("strata node: no cluster secret in the node's configuration (join again); "
                  "floating addresses stay off this node", flush=True)
            return {}
        return keepalived.config(self.config["name"], members, interface,
                                 keepalived.auth_pass(self.config["secret_key"]),
                                 notify=self.takeover_script())

    def takeover_script(self) -> str:
        """The command keepalived runs with the owner's name when this node takes another
        node's address over: a script that runs ``services.file.takeover`` with this venv's
        Python. A script, since keepalived runs the real path of a command (a venv's python
        is a symlink to the system's, which then knows nothing of the venv); errors go to
        ``log/takeover.log`` (keepalived drops a script's output)."""
        run = self.data / "run" / "vrrp"
        run.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.data / "log").mkdir(parents=True, exist_ok=True)
        script = run / "takeover"
        write_if_changed(script, "#!/bin/sh\n# written by the Strata node agent: keepalived's "
                         "notify_master (services/file/takeover.py)\n"
                         f'exec {sys.executable} -m {TAKEOVER} {self.data} "$@" '
                         f'2>>{self.data}/log/takeover.log\n', mode=0o700)
        return str(script)

    def apply(self, services: list[str], options: dict) -> None:
        """Start the daemons of services newly assigned, stop those of services taken away
        (and every daemon when the options changed: they are rendered from them)."""
        options = {**options, "supervised": True}
        if options != self.options:
            for service in self.services:
                self.sup.stop_group(service)
            self.services, self.options = [], options
            self.sup.env["STRATA_SERVICE_OPTIONS"] = json.dumps(options)
        for service in [s for s in self.services if s not in services]:
            print(f"strata node: {service} taken away; stopping its daemons", flush=True)
            self.sup.stop_group(service)
            self.services.remove(service)
        modules = {m.__name__.split(".")[-2]: m for m in service_up_modules()}
        for service in [s for s in services if s not in self.services]:
            module = modules.get(service)
            if module is None:
                print(f"strata node: the plane assigned {service}, which this version of "
                      "Strata does not have", flush=True)
                continue
            self.start_service(service, module.daemons(self.data, options))

    def start_service(self, service: str, specs: list) -> None:
        started = [(self.sup.start(spec.name, spec.argv, env=spec.env, stop=spec.stop,
                                   spec=spec, group=service), spec) for spec in specs]
        for child, spec in started:
            if spec.ready is None:
                continue
            try:
                child.wait_ready(lambda: self.stopping or spec.ready(), DAEMON_START_TIMEOUT,
                                 "starting", poll=0.1)
            except ChildFailed as exc:   # supervision starts it again, on its back-off
                print(f"strata node: {spec.name}: {exc}", flush=True)
        self.services.append(service)
        print(f"strata node: {service} started: "
              f"{', '.join(spec.name for spec in specs) or 'no daemons'}", flush=True)
        if specs:
            self.sup.run_quietly(f"reconcile-{service}", self.sup.reconcile_argv + [service])

"""`strata up`: run the whole appliance in the foreground.

Starts, in order: a private redis-server on a unix socket in the data directory (unless
STRATA_REDIS_URL points at one), the database migrations and meanwhile the services' daemons,
the bootstrap (admin user, credentials.json, default pool, pools mounted again), then together
the web server (API and console) and a Celery worker, and once the web server answers, Celery
beat. Children run in their own sessions so that Ctrl-C reaches only this process, which then
stops them in reverse order, a layer at a time (the plane's processes, the daemons, the
broker).

A child that dies is started again after a back-off (:class:`plumbing.process.RestartPolicy`);
one that keeps exiting at once is given up, saying so (for redis and the web server, without
which nothing works, `strata up` then stops). After a daemon's restart its service puts back
what the daemon held in memory, as the database says (``DaemonSpec.reconcile``: a new tgtd
has no targets, a new qemu-storage-daemon no exports). Each child's state, restart count and
last exit are in ``run/daemons.json`` (:mod:`console.daemons`), which the health answer and
the console's dashboard show.
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from console.daemons import worker_name, write_states
from plane.discovery import modules_named
from plumbing import tls
from plumbing.process import (Child, ChildFailed, DaemonSpec, RestartPolicy, describe_exit,
                              die_with_parent, socket_answers, wait_for_socket)
from plumbing.rungroup import AlreadyRunning, RunGroup, start_ticks
from plumbing.workclass import BACKGROUND, CHECKPOINTS, ClassGroups, read_shares

STOP_TIMEOUT = 20.0
ONE_SHOT_TIMEOUT = 900.0  # migrate / bootstrap: minutes at most, even on a slow disk
DAEMON_START_TIMEOUT = 60.0  # a loaded machine can take long to import and bind
RECONCILE_TIMEOUT = 300.0
WATCH_POLL = 0.2


def service_up_modules() -> list:
    """`<service>/up.py`: options and daemons for `strata up`."""
    return modules_named("up")


def add_service_arguments(parser) -> None:
    for module in service_up_modules():
        module.add_arguments(parser)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Supervised:
    """One child of `strata up` with what it takes to start it again and its history."""

    def __init__(self, child: Child, spec: DaemonSpec, essential: bool, policy: RestartPolicy,
                 group: str):
        self.child, self.spec, self.essential, self.policy = child, spec, essential, policy
        self.group = group                  # stopped together with the rest of its group
        self.state = "running"
        self.restarts = 0
        self.started = time.monotonic()
        self.started_at = _now()
        self.last_exit: dict | None = None
        self.due = 0.0                      # when a restarting child is started again
        self.killed = False                 # the stop had to SIGKILL it

    def record(self) -> dict:
        pid = self.child.pid if self.state == "running" else None
        # the start time tells a later start that this PID is still this child (a PID is reused)
        return {"state": self.state, "pid": pid, "start_ticks": pid and start_ticks(pid),
                "restarts": self.restarts, "started_at": self.started_at,
                "last_exit": self.last_exit, "log": str(self.child.log)}


class Supervisor:
    def __init__(self, data_dir: Path, env: dict, policy=RestartPolicy):
        self.data_dir, self.env = data_dir, env
        self.children: list[Supervised] = []
        self.stopping = False
        self.make_policy = policy
        self.reconcile_argv: list | None = None    # manage.py strata_reconcile, once migrated
        self.classes = ClassGroups(data_dir)       # the classes of work's cgroups

    def start(self, name: str, argv: list, env: dict | None = None, stop=None, *,
              spec: DaemonSpec | None = None, essential: bool = False,
              group: str = "daemons") -> Child:
        """Start a child; ``group``: the children started as one layer (``broker``,
        ``daemons``, ``plane``), which stop together, the last layer first."""
        spec = spec or DaemonSpec(name=name, argv=argv, env=env or {}, stop=stop)
        joins = self.classes.procs_file(spec.work_class) if spec.work_class else None
        child = Child(name, argv, self.data_dir / "log" / f"{name}.log",
                      env={**self.env, **(env or {})}, cwd=self.data_dir, stop=stop,
                      tied=True, cgroup_procs=joins).start()
        self.children.append(Supervised(child, spec, essential, self.make_policy(), group))
        self.save()
        return child

    def save(self) -> None:
        write_states(self.data_dir, {s.child.name: s.record() for s in self.children})

    def run_once(self, name: str, argv: list, timeout: float = ONE_SHOT_TIMEOUT,
                 proc: subprocess.Popen | None = None) -> str:
        """Run a one-shot step (migrate, bootstrap) to its end; Ctrl-C or ``timeout`` stops
        it, so a step that hangs never keeps `strata up` from exiting. ``proc``: the step
        already started with :meth:`spawn`, so that other work went on meanwhile."""
        code, out, err, failure = self._run(name, argv, timeout, proc)
        if failure or code != 0:
            tail = (err or out).strip().splitlines()[-15:]
            raise SystemExit(f"strata up: {name} {failure or 'failed'}:\n" + "\n".join(tail))
        return out

    def spawn(self, argv: list) -> subprocess.Popen:
        """Start a one-shot step; :meth:`run_once` waits for it."""
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                cwd=self.data_dir, preexec_fn=die_with_parent())

    def _run(self, name: str, argv: list, timeout: float,
             proc: subprocess.Popen | None = None):
        proc = proc or self.spawn(argv)
        deadline = time.monotonic() + timeout
        failure = None
        while True:
            try:
                out, err = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stopping or time.monotonic() > deadline:
                    failure = ("interrupted" if self.stopping
                               else f"did not finish in {timeout:.0f} s")
                    proc.kill()
                    out, err = proc.communicate()
                    break
        with open(self.data_dir / "log" / f"{name}.log", "a") as f:
            f.write(out + err)
        return proc.returncode, out, err, failure

    def stop_all(self) -> None:
        """Stop the children a group at a time, the last started first (the plane's processes,
        then the daemons they drive, then the broker); a group's children stop together."""
        self.stopping = True
        groups: dict[str, list[Supervised]] = {}
        for sup in self.children:
            groups.setdefault(sup.group, []).append(sup)
        for members in reversed(list(groups.values())):
            threads = [threading.Thread(target=self._stop, args=(sup,)) for sup in members]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if self.children:
            self.save()

    @staticmethod
    def _stop(sup: Supervised) -> None:
        child = sup.child

        def report(exc):
            print(f"strata: stopping {child.name}: {exc}", flush=True)

        if child.stop(STOP_TIMEOUT, on_error=report):
            print(f"strata: {child.name} did not stop in {STOP_TIMEOUT:.0f}s; killed",
                  flush=True)
            sup.killed = True
        if sup.state != "failed":
            sup.state = "stopped"

    def watch(self) -> int:
        """Supervise until Ctrl-C (0), or until an essential child is given up (1)."""
        while not self.stopping:
            if not self.watch_once():
                return 1
            time.sleep(WATCH_POLL)
        return 0

    def watch_once(self) -> bool:
        """One round of :meth:`watch`: exits recorded, due restarts made, what restarted
        daemons held put back; False once an essential child is given up."""
        restarted = []
        for sup in list(self.children):
            if sup.state == "running" and sup.child.returncode is not None:
                if not self._exited(sup):
                    return False
            if sup.state == "restarting" and time.monotonic() >= sup.due \
                    and not self.stopping:
                if self._restart(sup):
                    restarted.append(sup)
                elif sup.state == "failed" and sup.essential:
                    return False
        # after every restart of this round, so a reconcile never meets a daemon that is
        # still down (the plane's sessions would start one of their own)
        for label in dict.fromkeys(s.spec.reconcile for s in restarted if s.spec.reconcile):
            self._reconcile(label)
        return True

    def stop_group(self, group: str) -> None:
        """Stop the children of one group and forget them (a node's service taken away)."""
        members = [sup for sup in self.children if sup.group == group]
        threads = [threading.Thread(target=self._stop, args=(sup,)) for sup in members]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.children = [sup for sup in self.children if sup.group != group]
        self.save()

    def _exited(self, sup: Supervised) -> bool:
        """Record the exit and schedule the restart; False if an essential child is given up."""
        child = sup.child
        sup.last_exit = {**describe_exit(child.returncode), "at": _now()}
        how = sup.last_exit["signal"] or f"code {sup.last_exit['code']}"
        delay = sup.policy.exited(time.monotonic() - sup.started)
        if delay is None:
            sup.state = "failed"
            self.save()
            print(f"strata: {child.name} exited ({how}) {sup.policy.give_up_after} times within "
                  f"{sup.policy.stable_after:.0f} s of starting; not starting it again; see "
                  f"{child.log}" + _indented(child.tail(8)), flush=True)
            return not sup.essential
        sup.state, sup.due = "restarting", time.monotonic() + delay
        self.save()
        print(f"strata: {child.name} exited ({how}); starting it again in {delay:.1f} s",
              flush=True)
        return True

    def _restart(self, sup: Supervised) -> bool:
        """Start a child again and wait until it is ready; True once it is."""
        spec, child = sup.spec, sup.child
        try:
            if spec.prepare is not None:
                spec.prepare()
            child.start()
        except Exception as exc:           # not installed any more, a config it cannot write
            print(f"strata: {child.name} could not be started again: {exc}", flush=True)
            child.proc = None
            sup.last_exit = {"code": None, "signal": None, "at": _now(), "error": str(exc)}
            sup.state, sup.policy.quick_exits = "failed", sup.policy.give_up_after
            self.save()
            return False
        sup.restarts += 1
        sup.started, sup.started_at, sup.state = time.monotonic(), _now(), "running"
        self.save()
        if spec.ready is not None:
            try:
                child.wait_ready(lambda: self.stopping or spec.ready(), DAEMON_START_TIMEOUT,
                                 "starting again", poll=0.1)
            except ChildFailed as exc:
                if not exc.exited:         # hung: kill it, the next round counts the exit
                    child.stop(5.0)
                return False
        print(f"strata: {child.name} is running again (pid {child.pid}, restart "
              f"{sup.restarts})", flush=True)
        return True

    def _reconcile(self, label: str) -> None:
        """The service's ``bootstrap.reconcile()``: what the restarted daemon held, back."""
        if self.reconcile_argv is not None:
            self.run_quietly("reconcile", self.reconcile_argv + [label])

    def run_quietly(self, name: str, argv: list, timeout: float = RECONCILE_TIMEOUT) -> bool:
        """A step of a restart (manage.py ...): its output printed, a failure said, never
        fatal; True when it succeeded."""
        code, out, err, failure = self._run(name, argv, timeout)
        if failure or code != 0:
            print(f"strata: {name} {failure or 'failed'}; see "
                  f"{self.data_dir / 'log' / (name + '.log')}" + _indented(err or out),
                  flush=True)
            return False
        if out.strip():
            print(out.strip(), flush=True)
        return True


def web_argv(host: str, port: int, tls_files: tuple[str, str] | None = None) -> list[str]:
    """The console's and API's web server: uvicorn on Strata's HTTP protocol, whose limits on
    clients (header size and count, header, body and send timeouts, connections per address)
    come from ``STRATA_HTTP_*`` variables (``plumbing.http_protocol.HttpLimits.from_env``)."""
    argv = [sys.executable, "-m", "uvicorn", "console.asgi:application", "--host", host, "--port",
            str(port), "--lifespan", "off", "--http", "plumbing.http_protocol:HttpProtocol",
            # the peer's address is a fact: X-Forwarded-For from a local client must not
            # choose the address that sign-in limits and the audit log see
            "--no-proxy-headers"]
    if tls_files:
        argv += ["--ssl-certfile", tls_files[0], "--ssl-keyfile", tls_files[1]]
    return argv


def _indented(tail: str, lines: int = 8) -> str:
    tail = tail.strip().splitlines()[-lines:]
    return ("\n  " + "\n  ".join(tail)) if tail else ""


def _wait(child: Child, ready, timeout: float, what: str) -> None:
    """Return once ``ready()``; else stop `strata up` saying why, with the child's log."""
    try:
        child.wait_ready(ready, timeout, what, poll=0.1)
    except ChildFailed as exc:
        raise SystemExit(f"strata up: {exc}; see {child.log}" + _indented(exc.tail)) from None


def _http_answers(url: str, cafile: str | None = None) -> bool:
    """Whether ``url`` answers (any HTTP status); over HTTPS trusting ``cafile`` (`strata up
    --tls`)."""
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(url, timeout=5, context=context):
            return True
    except urllib.error.HTTPError:
        return True


def _requeue_unacked(broker_url: str) -> None:
    """Before the worker starts again: put back on their queues the tasks the dead worker
    had taken but not finished (tasks are acknowledged once done; with one worker per
    appliance every unacknowledged task was its). A job it was running is then recorded as
    interrupted by the new worker; the others run."""
    from kombu import Connection  # only for a restart: `strata` commands import this module

    try:
        with Connection(broker_url, connect_timeout=5) as conn:
            channel = conn.default_channel
            tags = channel.client.hkeys(channel.unacked_key)
            for tag in tags:
                channel.qos.restore_by_tag(tag)
    except Exception as exc:       # the broker is down too: its own restart comes first
        print(f"strata: the worker's unfinished tasks could not be queued again: {exc}",
              flush=True)
        return
    if tags:
        print(f"strata: {len(tags)} unfinished task(s) of the worker queued again", flush=True)


def _start_daemons(sup: Supervisor, specs: list[DaemonSpec]) -> None:
    """Start the services' daemons all at once, then wait until each is ready."""
    children = [(sup.start(spec.name, spec.argv, env=spec.env, stop=spec.stop, spec=spec), spec)
                for spec in specs]
    for child, spec in children:
        if spec.ready is not None:
            _wait(child, spec.ready, DAEMON_START_TIMEOUT, "starting")


def _release(manage: list, env: dict, data: Path) -> None:
    """The services' shutdown once every daemon stopped: pools unmounted and their loop
    devices detached, so nothing of the data directory stays attached to the machine."""
    try:
        done = subprocess.run(manage + ["strata_shutdown"], env=env, cwd=data, timeout=120,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print("strata up: releasing the pools did not finish in 120 s", flush=True)
        return
    with open(data / "log" / "shutdown.log", "a") as f:
        f.write(done.stdout + done.stderr)
    if done.stdout.strip():
        print(done.stdout.strip(), flush=True)
    if done.returncode != 0:
        print("strata up: releasing the pools failed:\n" + done.stderr.strip()[-2000:],
              flush=True)


def _tls_options(data: Path, options: dict) -> dict:
    """With ``--tls``: the certificate (the operator's or the appliance's own, made once), its
    fingerprint printed; the daemons find it in the options (``tls_cert``, ``tls_key``), and
    the appliance's own processes trust it besides the system's CAs (environment)."""
    if not options.get("tls"):
        if options.get("tls_cert") or options.get("tls_key"):
            raise SystemExit("strata up: --tls-cert and --tls-key need --tls")
        return {}
    hosts = [options.get(k) for k in ("host", "data_host", "s3_host", "file_bind")]
    hosts += [f"*.{d}" for d in options.get("s3_domains") or ["localhost"]]
    try:
        cert = tls.certificate(data, options.get("tls_cert"), options.get("tls_key"),
                               [h for h in hosts if h])
    except tls.TlsError as exc:
        raise SystemExit(f"strata up: {exc}") from None
    options.update(tls_cert=cert.cert, tls_key=cert.key, tls_fingerprint=cert.fingerprint,
                   tls_generated=cert.generated)
    print(f"TLS certificate: {cert.cert}{' (made by Strata, self-signed)' if cert.generated else ''}"
          f"\n  SHA-256 fingerprint: {cert.fingerprint}", flush=True)
    bundle = tls.trust_bundle(data / "run" / "trust.pem", cert.cert)
    return {"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "AWS_CA_BUNDLE": bundle}


def up(data_dir: str, host: str, port: int, default_pool_size: str,
       options: dict | None = None) -> int:
    data = Path(data_dir).resolve()
    for sub in ("run", "log"):
        # root's alone: sockets, pid files, daemon configs (CHAP accounts, tokens) and logs;
        # every daemon that uses them runs as root. chmod too: older installs made them 0755
        (data / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        (data / sub).chmod(0o700)
    run = _claim(data)
    options = dict(options or {}, host=host, port=port, supervised=True)
    plane_only = bool(options.get("plane_only"))
    if plane_only:
        missing = [v for v in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL") if not os.environ.get(v)]
        if missing:
            raise SystemExit(f"strata plane: set {' and '.join(missing)} (the cluster's "
                             "PostgreSQL and Redis, with passwords)")
    trust = _tls_options(data, options)
    env = dict(os.environ, STRATA_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="console.settings",
               PYTHONUNBUFFERED="1", STRATA_SERVICE_OPTIONS=json.dumps(options), **trust)
    py = sys.executable
    sup = Supervisor(data, env)
    if not sup.classes.apply(read_shares(data)):
        print("strata up: no cgroup v1 cpu hierarchy we may use: the classes of work's "
              "shares are not enforced by the kernel", flush=True)

    def on_signal(signum, frame):
        sup.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    manage = [py, "-m", "django"]   # not manage.py: an installed wheel has no checkout
    migrated = False
    try:
        if not env.get("STRATA_REDIS_URL"):
            sock = data / "run" / "redis.sock"
            sock.unlink(missing_ok=True)
            redis = shutil.which("redis-server")
            if not redis:
                raise SystemExit("strata up: redis-server is not installed "
                                 "(apt-get install redis-server), or set STRATA_REDIS_URL")
            # every write in the append-only file before Redis answers it (appendfsync
            # always): a job the API accepted (202) is on the queue even if Redis is killed
            # the next moment; with `everysec` a kill under a slow disk lost a queued job,
            # left pending for ever (the soak saw it). The broker's traffic is small.
            argv = [redis, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                    "--dir", str(data / "run"), "--appendonly", "yes", "--appendfsync",
                    "always", "--save", "", "--daemonize", "no"]
            child = sup.start("redis", argv, essential=True, group="broker", spec=DaemonSpec(
                name="redis", argv=argv, ready=lambda: socket_answers(sock),
                prepare=lambda: sock.unlink(missing_ok=True)))
            if not wait_for_socket(sock, 10.0, child):
                raise SystemExit(f"strata up: redis did not start; see {child.log}"
                                 + _indented(child.tail(8)))
        migrate = manage + ["migrate", "--noinput"]
        migrating = sup.spawn(migrate)
        try:   # the daemons need no database: they start while it is migrated
            if not plane_only:   # `strata plane`: the nodes run the data daemons
                _start_daemons(sup, [spec for module in service_up_modules()
                                     for spec in module.daemons(data, options)])
        except BaseException:
            migrating.kill()
            migrating.wait()
            raise
        sup.run_once("migrate", migrate, proc=migrating)
        migrated = True
        sup.reconcile_argv = manage + ["strata_reconcile"]
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        base = f"{'https' if trust else 'http'}://{shown}:{port}"
        print(sup.run_once("bootstrap", manage + [
            "strata_bootstrap", "--api-url", f"{base}/api/v1/", "--console-url", f"{base}/",
            "--default-pool-size", default_pool_size]).strip(), flush=True)
        # the web server is up once it answers a page that needs no pool: the health answer
        # looks at every pool, and one on a Ceph cluster that is down makes it wait
        ready_url = f"{base}/login/"
        cafile = options.get("tls_cert")
        argv = web_argv(host, port, (options["tls_cert"], options["tls_key"]) if trust else None)
        # the API serves checkpoint saves and restores (begin, commit's verification, leases)
        web = sup.start("web", argv, essential=True, group="plane", spec=DaemonSpec(
            name="web", argv=argv, ready=lambda: _http_answers(ready_url, cafile),
            work_class=CHECKPOINTS))
        # one worker per appliance: no neighbours to sync with at start (mingle) or after
        argv = [py, "-m", "celery", "-A", "plane", "worker", "-l", "info", "--concurrency",
                "2", "-n", worker_name(port), "--without-mingle", "--without-gossip"]
        broker = env.get("STRATA_REDIS_URL") or f"redis+socket://{data / 'run' / 'redis.sock'}"
        sup.start("worker", argv, group="plane", spec=DaemonSpec(
            name="worker", argv=argv, prepare=lambda: _requeue_unacked(broker),
            work_class=BACKGROUND))
        _wait(web, lambda: _http_answers(ready_url, cafile), 60.0, f"waiting for {ready_url}")
        # beat once the web server answers: nobody waits for it, and starting at the same time
        # it would take the CPU the web server and the worker need to start
        argv = [py, "-m", "celery", "-A", "plane", "beat", "-l", "info",
                "--schedule", str(data / "run" / "celerybeat-schedule"), "--pidfile", ""]
        sup.start("beat", argv, group="plane",
                  spec=DaemonSpec(name="beat", argv=argv, work_class=BACKGROUND))
        if not plane_only:
            # this host is the one node of its cluster: its agent heartbeats for the daemons
            # supervised here (the bootstrap wrote its credential to node.json)
            argv = [py, "-m", "console.cli.main", "node", "run", "--config",
                    str(data / "node.json"), "--data-dir", str(data), "--report-only"]
            sup.start("node", argv, group="plane",
                      spec=DaemonSpec(name="node", argv=argv, work_class=BACKGROUND))
        what = "The plane is up" if plane_only else "Strata is up"
        print(f"{what}.\n  console:     {base}/\n  API:         {base}/api/v1/\n"
              f"  credentials: {data / 'credentials.json'}\n  logs:        {data / 'log'}\n"
              "Press Ctrl-C to stop.", flush=True)
        code = sup.watch()
    finally:
        began = time.monotonic()
        sup.stop_all()
        if migrated:
            _release(manage, sup.env, data)
        _sweep(run, sup, began)
        sup.classes.remove()
    print("Strata stopped.", flush=True)
    return code


def _claim(data: Path) -> RunGroup:
    """The data directory for this run: its lock (a second `strata up` on it is refused),
    what an earlier run left running ended (said), the reaper that ends this run if this
    process dies, and this process in the run's cgroup."""
    run = RunGroup(data)
    try:
        run.lock()
    except AlreadyRunning as exc:
        raise SystemExit(f"strata up: {exc}") from None
    for line in run.end_leftovers():
        print(f"strata up: {line}", flush=True)
    run.start_reaper()
    run.join()
    return run


def _sweep(run: RunGroup, sup: Supervisor, began: float) -> None:
    """After the stop: end what of the run still runs (a daemon's own children, a FUSE
    daemon), and say what had to be killed and how long the stop took."""
    stray = run.sweep()
    if stray:
        print("strata: still running after the stop, ended: "
              + ", ".join(f"{p.name} ({p.pid})" for p in stray), flush=True)
    killed = [s.child.name for s in sup.children if s.killed] + [p.name for p in stray]
    print(f"strata: stopped in {time.monotonic() - began:.1f} s"
          + (f"; had to kill: {', '.join(killed)}" if killed else ""), flush=True)
    run.close()

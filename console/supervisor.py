"""`strata up`: run the whole appliance in the foreground.

Starts, in order: a private redis-server on a unix socket in the data directory (unless
STRATA_REDIS_URL points at one), database migrations and the bootstrap (admin user,
credentials.json, default pool, pools mounted again), the web server (API and console), a
Celery worker and Celery beat. Children run in their own sessions so that Ctrl-C reaches only
this process, which then stops them in reverse order. If any child dies, everything stops.
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from plane.discovery import modules_named
from plumbing import tls
from plumbing.process import Child, ChildFailed, DaemonSpec, wait_for_socket

STOP_TIMEOUT = 20.0
ONE_SHOT_TIMEOUT = 900.0  # migrate / bootstrap: minutes at most, even on a slow disk
DAEMON_START_TIMEOUT = 60.0  # a loaded machine can take long to import and bind


def service_up_modules() -> list:
    """`<service>/up.py`: options and daemons for `strata up`."""
    return modules_named("up")


def add_service_arguments(parser) -> None:
    for module in service_up_modules():
        module.add_arguments(parser)


class Supervisor:
    def __init__(self, data_dir: Path, env: dict):
        self.data_dir, self.env = data_dir, env
        self.children: list[Child] = []
        self.stopping = False

    def start(self, name: str, argv: list, env: dict | None = None, stop=None) -> Child:
        child = Child(name, argv, self.data_dir / "log" / f"{name}.log",
                      env={**self.env, **(env or {})}, cwd=self.data_dir, stop=stop).start()
        self.children.append(child)
        return child

    def run_once(self, name: str, argv: list, timeout: float = ONE_SHOT_TIMEOUT) -> str:
        """Run a one-shot step (migrate, bootstrap) to its end; Ctrl-C or ``timeout`` stops
        it, so a step that hangs never keeps `strata up` from exiting."""
        proc = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                cwd=self.data_dir)
        deadline = time.monotonic() + timeout
        failure = None
        while True:
            try:
                out, err = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stopping or time.monotonic() > deadline:
                    failure = "interrupted" if self.stopping else f"did not finish in {timeout:.0f} s"
                    proc.kill()
                    out, err = proc.communicate()
                    break
        with open(self.data_dir / "log" / f"{name}.log", "a") as f:
            f.write(out + err)
        if failure or proc.returncode != 0:
            tail = (err or out).strip().splitlines()[-15:]
            raise SystemExit(f"strata up: {name} {failure or 'failed'}:\n" + "\n".join(tail))
        return out

    def stop_all(self) -> None:
        self.stopping = True
        for child in reversed(self.children):
            def report(exc, name=child.name):
                print(f"strata: stopping {name}: {exc}", flush=True)

            if child.stop(STOP_TIMEOUT, on_error=report):
                print(f"strata: {child.name} did not stop in {STOP_TIMEOUT:.0f}s; killed",
                      flush=True)

    def watch(self) -> int:
        while not self.stopping:
            for child in self.children:
                code = child.returncode
                if code is not None:
                    print(f"strata: {child.name} exited with code {code}; see {child.log}",
                          flush=True)
                    return 1
            time.sleep(0.5)
        return 0


def _indented(tail: str, lines: int = 8) -> str:
    tail = tail.strip().splitlines()[-lines:]
    return ("\n  " + "\n  ".join(tail)) if tail else ""


def _wait(child: Child, ready, timeout: float, what: str) -> None:
    """Return once ``ready()``; else stop `strata up` saying why, with the child's log."""
    try:
        child.wait_ready(ready, timeout, what, poll=0.1)
    except ChildFailed as exc:
        raise SystemExit(f"strata up: {exc}; see {child.log}" + _indented(exc.tail)) from None


def _wait_for_http(url: str, child: Child, timeout=60.0, cafile: str | None = None) -> None:
    context = ssl.create_default_context(cafile=cafile) if cafile else None

    def answers() -> bool:
        with urllib.request.urlopen(url, timeout=2, context=context):
            return True

    _wait(child, answers, timeout, f"waiting for {url}")


def _start_daemon(sup: Supervisor, spec: DaemonSpec) -> None:
    child = sup.start(spec.name, spec.argv, env=spec.env, stop=spec.stop)
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
        (data / sub).mkdir(parents=True, exist_ok=True)
    options = dict(options or {}, host=host, port=port)
    trust = _tls_options(data, options)
    env = dict(os.environ, STRATA_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="console.settings",
               PYTHONUNBUFFERED="1", STRATA_SERVICE_OPTIONS=json.dumps(options), **trust)
    py = sys.executable
    sup = Supervisor(data, env)

    def on_signal(signum, frame):
        sup.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    manage = [py, str(Path(__file__).resolve().parent.parent / "manage.py")]
    migrated = False
    try:
        if not env.get("STRATA_REDIS_URL"):
            sock = data / "run" / "redis.sock"
            sock.unlink(missing_ok=True)
            redis = shutil.which("redis-server")
            if not redis:
                raise SystemExit("strata up: redis-server is not installed "
                                 "(apt-get install redis-server), or set STRATA_REDIS_URL")
            child = sup.start("redis", [
                redis, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                "--dir", str(data / "run"), "--appendonly", "yes", "--save", "",
                "--daemonize", "no"])
            if not wait_for_socket(sock, 10.0, child):
                raise SystemExit(f"strata up: redis did not start; see {child.log}"
                                 + _indented(child.tail(8)))
        sup.run_once("migrate", manage + ["migrate", "--noinput"])
        migrated = True
        for module in service_up_modules():
            for spec in module.daemons(data, options):
                _start_daemon(sup, spec)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        base = f"{'https' if trust else 'http'}://{shown}:{port}"
        print(sup.run_once("bootstrap", manage + [
            "strata_bootstrap", "--api-url", f"{base}/api/v1/", "--console-url", f"{base}/",
            "--default-pool-size", default_pool_size]).strip(), flush=True)
        web_tls = ["--ssl-certfile", options["tls_cert"], "--ssl-keyfile", options["tls_key"]] \
            if trust else []
        web = sup.start("web", [py, "-m", "uvicorn", "console.asgi:application",
                                "--host", host, "--port", str(port), "--lifespan", "off",
                                *web_tls])
        sup.start("worker", [py, "-m", "celery", "-A", "plane", "worker", "-l", "info",
                             "--concurrency", "2", "-n", f"strata-{port}@%h"])
        sup.start("beat", [py, "-m", "celery", "-A", "plane", "beat", "-l", "info",
                           "--schedule", str(data / "run" / "celerybeat-schedule"),
                           "--pidfile", ""])
        _wait_for_http(f"{base}/api/v1/health", web, cafile=options.get("tls_cert"))
        print(f"Strata is up.\n  console:     {base}/\n  API:         {base}/api/v1/\n"
              f"  credentials: {data / 'credentials.json'}\n  logs:        {data / 'log'}\n"
              "Press Ctrl-C to stop.", flush=True)
        code = sup.watch()
    finally:
        sup.stop_all()
        if migrated:
            _release(manage, sup.env, data)
    print("Strata stopped.", flush=True)
    return code

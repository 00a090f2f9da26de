"""Helpers shared by the protection tests."""
import hashlib
import os
import socket

from tests.kit import wait_for


def file_hashes(root) -> dict:
    """Relative path -> SHA-256 of every regular file under ``root`` (not .snapshots)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if os.path.samefile(dirpath, root):
            dirnames[:] = [d for d in dirnames if d != ".snapshots"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def write_files(root, files: dict) -> None:
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)


class CutProxy:
    """A TCP proxy to ``upstream`` that, while ``cut_after`` is set, closes the link (both
    ways) once that many more client bytes went through: a link dropping mid-transfer.
    With ``count_download`` set, the bytes counted are the server's (a pulled stream)."""

    def __init__(self, upstream_host: str, upstream_port: int):
        import threading
        self.upstream = (upstream_host, upstream_port)
        self.cut_after = None
        self.count_download = False
        self.cuts = 0
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            pair = (client, server)
            down = self.count_download
            threading.Thread(target=self._pump, args=(client, server, not down, pair),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, down, pair),
                             daemon=True).start()

    def _take(self, n: int) -> int:
        """How many of ``n`` bytes may pass; -1 when the link is to be cut now."""
        with self._lock:
            if self.cut_after is None:
                return n
            if self.cut_after <= 0:
                return -1
            allowed = min(n, self.cut_after)
            self.cut_after -= allowed
            return allowed

    def _pump(self, src, dst, counted, pair):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                allowed = self._take(len(data)) if counted else len(data)
                if allowed > 0:
                    dst.sendall(data[:allowed])
                if allowed < len(data):
                    with self._lock:
                        self.cuts += 1
                    break
        except OSError:
            pass
        finally:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        self._stop = True
        self.sock.close()


class WorkerProcess:
    """A real Celery worker subprocess on the test database and broker, to be killed with
    SIGKILL mid-job (the in-thread ``worker`` fixture cannot be); ``pool="prefork"`` runs the
    job in a child process (as `strata up`'s worker does), which can be killed alone;
    ``command="beat"`` runs Celery beat with the database scheduler instead; ``prefetch``:
    the worker's prefetch multiplier (2: it takes a second message while its child runs one)."""

    def __init__(self, data_dir, log_dir, lock_ttl: int = 3, command: str = "worker",
                 pool: str = "solo", extra_env: dict | None = None, prefetch: int = 1):
        import subprocess
        import sys

        from django.conf import settings
        db = settings.DATABASES["default"]
        env = dict(os.environ)
        env.update({
            "STRATA_DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/"
                                   f"{db['NAME']}",
            "STRATA_REDIS_URL": settings.CELERY_BROKER_URL,
            "STRATA_DATA_DIR": str(data_dir),
            "STRATA_PROTECTION_LOCK_TTL": str(lock_ttl),
            # the test's key: secrets sealed in the database (peer tokens) must open there
            "STRATA_SECRET_KEY": settings.SECRET_KEY,
            "PYTHONPATH": REPO,
            **(extra_env or {}),
        })
        self.log_path = os.path.join(str(log_dir), f"{command}.log")
        if command == "worker":
            args = ["worker", "--pool", pool, "--concurrency", "1", "--without-heartbeat",
                    "--without-gossip", "--without-mingle", "--prefetch-multiplier",
                    str(prefetch)]
        else:
            args = ["beat", "--schedule", os.path.join(str(log_dir), "beat-schedule")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "plane", *args, "-l", "info"],
            cwd=REPO, env=env, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT)

    def kill9(self, children: bool = False) -> None:
        """SIGKILL the worker (``children``: its pool's children first, which would
        otherwise finish the task they run)."""
        import signal
        if self.proc.poll() is None:
            if children:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    for child in f.read().split():
                        os.kill(int(child), signal.SIGKILL)
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def kill_mid_copy(job_id: int, worker: WorkerProcess, started: int = 8 << 20,
                  before: int = 24 << 20) -> None:
    """SIGKILL ``worker`` once the job has copied ``started`` bytes (its Job's bytes_done),
    then check the kill landed mid-copy: still running, under ``before`` bytes done."""
    from plane.models import Job

    try:
        wait_for(lambda: (Job.objects.get(pk=job_id).bytes_done or 0) >= started, 120,
                 "the copy to get going")
    finally:
        worker.kill9()
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and (job.bytes_done or 0) < before, job.message

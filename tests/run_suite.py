"""Run the whole test suite: clear leftovers of a crashed earlier run, find or start
PostgreSQL and Redis, then run pytest. Called by `make test`.

PostgreSQL and Redis at 127.0.0.1 are used when they answer (as in CI); otherwise a private
PostgreSQL cluster and redis-server are started in a temporary directory and stopped after.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script: tests/ is sys.path[0], not the checkout
from tests.kit import free_port, port_answers, wait_port  # noqa: E402  (standard library only)


def start_postgres(tmp: Path, procs: list) -> str:
    bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not bindirs:
        raise SystemExit("run_suite: no PostgreSQL at 127.0.0.1:5432 and none installed "
                         "(apt-get install postgresql)")
    bindir, port = bindirs[-1], free_port()
    pgdata = tmp / "pgdata"
    pgdata.mkdir()
    shutil.chown(tmp, "postgres")
    shutil.chown(pgdata, "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(as_pg + [str(bindir / "initdb"), "-D", str(pgdata), "-A", "trust",
                            "-U", "postgres"], check=True, stdout=subprocess.DEVNULL)
    procs.append(subprocess.Popen(as_pg + [
        str(bindir / "postgres"), "-D", str(pgdata), "-p", str(port), "-k", str(tmp),
        "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_port(port, 30, what="PostgreSQL", interval=0.2)
    return f"postgres://postgres@127.0.0.1:{port}/postgres"


def start_redis(tmp: Path, procs: list) -> str:
    port = free_port()
    procs.append(subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--dir", str(tmp)],
                                  stdout=subprocess.DEVNULL))
    wait_port(port, 30, what="redis-server", interval=0.2)
    return f"redis://127.0.0.1:{port}/0"


# pytest workers: most tests wait on daemons and subprocesses, so one worker keeps about one
# of this machine's 2 cores busy; more would need more than its 8 loop devices
WORKERS = int(os.environ.get("STRATA_TEST_WORKERS", "2"))
PACKAGES = ["console", "dataplane", "plane", "plumbing", "services", "tests", "vector"]


def main(argv: list) -> int:
    subprocess.run([sys.executable, str(ROOT / "tests" / "cleanup_leftovers.py")], check=False)
    # the suite starts hundreds of Python processes (gateways, appliances, workers); where
    # PYTHONDONTWRITEBYTECODE is set (as in CI), each would compile the project's sources again
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *PACKAGES],
                   cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    tmp = Path(tempfile.mkdtemp(prefix="strata-test-suite-"))
    procs: list = []
    env = dict(os.environ)
    try:
        if "STRATA_DATABASE_URL" not in env:
            env["STRATA_DATABASE_URL"] = (
                "postgres://postgres@127.0.0.1:5432/test" if port_answers(5432, timeout=1)
                else start_postgres(tmp, procs))
        if "STRATA_REDIS_URL" not in env:
            if port_answers(6379, timeout=1):
                env["STRATA_REDIS_URL"] = "redis://127.0.0.1:6379/13"
                # the suite's own databases (13, and 14 for the second pytest worker: see
                # tests/parallel.py): an earlier run's killed workers left unacked task
                # messages there that would come back (an hour later) to a worker of this
                # run and claim a job row with the same id
                import redis
                for db in range(13, 13 + max(WORKERS, 1)):
                    redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()
            else:
                env["STRATA_REDIS_URL"] = start_redis(tmp, procs)
        env["STRATA_DATA_DIR"] = str(tmp / "data")
        print(f"run_suite: database {env['STRATA_DATABASE_URL']}, "
              f"redis {env['STRATA_REDIS_URL']}", flush=True)
        out = ROOT / "test-output"
        out.mkdir(exist_ok=True)
        # the slowest tests are listed at the end: the suite's time budget is 40 minutes
        cmd = [sys.executable, "-m", "pytest", f"--junitxml={out / 'junit.xml'}", "--durations=30",
               "-n", str(WORKERS), "--dist", "loadscope", *argv]
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (TimeoutError, RuntimeError) as e:  # no free port, or a server did not start
        sys.exit(f"run_suite: {e}")

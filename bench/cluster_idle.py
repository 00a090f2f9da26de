"""What an idle node costs the plane: database statements and Redis commands per node per
minute, and the resident memory of an idle agent; the projection for 100 and 1,000 nodes.

A real plane (`strata plane`, PostgreSQL and Redis with passwords) idles for a window with
no node, then with N agents (`strata node run`, no services assigned); the difference over N
is one node's share. Statements: PostgreSQL's ``xact_commit`` of the plane's own database
(Django runs in autocommit: one statement, one transaction; the transactions of a heartbeat
are also counted in-process below); Redis: MONITOR lines of the plane's database number.

    .venv/bin/python bench/cluster_idle.py [--nodes 2] [--window 30]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster_support import REDIS_DB, Cluster, psql  # noqa: E402
from tests.kit import wait_for  # noqa: E402


def transactions(cluster: Cluster) -> int:
    return int(psql("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = "
                    f"'{cluster.tag}'"))


def redis_commands(seconds: float) -> int:
    """Commands on the plane's Redis database during ``seconds`` (MONITOR, filtered)."""
    proc = subprocess.Popen(["redis-cli", "MONITOR"], stdout=subprocess.PIPE, text=True)
    count = [0]
    mark = re.compile(rf"\[{REDIS_DB} ")

    def read():
        for line in proc.stdout:
            if mark.search(line):
                count[0] += 1

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    time.sleep(seconds)
    proc.terminate()
    proc.wait()
    return count[0]


def window(cluster: Cluster, seconds: float) -> tuple[float, float]:
    """(database statements, Redis commands) per minute over one idle window."""
    before = transactions(cluster)
    redis = redis_commands(seconds)
    statements = transactions(cluster) - before
    return statements * 60 / seconds, redis * 60 / seconds


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the agent's daemons, if any)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
        children = Path(f"/proc/{p}/task/{p}/children")
        todo += [int(c) for c in children.read_text().split()] if children.exists() else []
    return total / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    cluster = Cluster().create()
    try:
        cluster.start_plane()
        time.sleep(5)                         # the start's own work settles
        base_db, base_redis = window(cluster, args.window)
        for i in range(args.nodes):
            name = f"idle{i}"
            assert cluster.join(name, f"127.0.0.{10 + i}").returncode == 0
            cluster.run_agent(name)
        for i in range(args.nodes):
            cluster.wait_state(f"idle{i}", "up", timeout=60)
        time.sleep(5)
        with_db, with_redis = window(cluster, args.window)
        rss = [rss_mib(proc.pid) for proc in cluster.agents.values()]
        per_db = max(0.0, with_db - base_db) / args.nodes
        per_redis = max(0.0, with_redis - base_redis) / args.nodes
        result = {"window_s": args.window, "nodes": args.nodes,
                  "plane_idle_db_per_min": round(base_db), "plane_idle_redis_per_min":
                  round(base_redis), "db_per_node_per_min": round(per_db, 1),
                  "redis_per_node_per_min": round(per_redis, 1),
                  "agent_rss_mib_median": round(statistics.median(rss), 1)}
        print(json.dumps(result, indent=1))
        print(f"idle plane alone: {base_db:.0f} database statements/min, {base_redis:.0f} Redis "
              "commands/min")
        print(f"one idle node: {per_db:.1f} database statements/min, {per_redis:.1f} Redis "
              f"commands/min; agent resident {statistics.median(rss):.1f} MiB")
        for n in (100, 1000):
            print(f"{n:>5} nodes: {base_db + n * per_db:,.0f} statements/min "
                  f"({(base_db + n * per_db) / 60:,.0f}/s), "
                  f"{base_redis + n * per_redis:,.0f} Redis commands/min, "
                  f"{n * 60 / 5:,.0f} heartbeats/min ({n / 5:,.0f}/s) on the web server")
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())

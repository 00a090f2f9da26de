"""`strata vector ...`: collections, builds and searches (a thin REST client; no Django).

    strata vector list | show NAME | delete NAME
    strata vector create NAME --dim 768 [--metric cosine] [--index hnsw] [--params JSON]
    strata vector build NAME [--no-wait]
    strata vector snapshot NAME SNAP
    strata vector search NAME --vector JSON [--k 10] [--filter JSON]
"""
from __future__ import annotations

import argparse
import json

from plane.cli.jobs import JOB_COLS, watch_job

COLS = ["name", "pool", "dimension", "metric", "index_type", "index_state", "vector_count",
        "memory_bytes"]
HIT_COLS = ["id", "score", "metadata"]


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def register(sub) -> dict:
    """Add `strata vector ...`; return its handler."""
    v = sub.add_parser("vector", help="vector collections").add_subparsers(
        dest="action", required=True)
    v.add_parser("list")
    x = v.add_parser("show"); x.add_argument("name")
    x = v.add_parser("create"); x.add_argument("name")
    x.add_argument("--dim", type=int, required=True)
    x.add_argument("--metric", default="l2", choices=["l2", "ip", "cosine"])
    x.add_argument("--index", default="flat", choices=["flat", "ivf_flat", "ivf_pq", "hnsw"])
    x.add_argument("--params", type=_json, default={}, help='JSON, e.g. {"nlist": 1024}')
    x.add_argument("--pool")
    x.add_argument("--expected-count", type=int, default=0)
    x = v.add_parser("delete"); x.add_argument("name")
    x = v.add_parser("build", help="train/rebuild the index (a job)")
    x.add_argument("name")
    x.add_argument("--no-wait", action="store_true")
    x = v.add_parser("snapshot"); x.add_argument("name"); x.add_argument("snapshot")
    x = v.add_parser("search"); x.add_argument("name")
    x.add_argument("--vector", type=_json, required=True, help="JSON list of numbers")
    x.add_argument("--k", type=int, default=10)
    x.add_argument("--filter", type=_json)
    return {"vector": vector}


def vector(c, args, out):
    base = "vector-collections/"
    if args.action == "list":
        out(c.list(base), COLS)
    elif args.action == "show":
        out(c.get(f"{base}{args.name}/"), COLS + ["params", "path", "stats"])
    elif args.action == "create":
        body = {"name": args.name, "dimension": args.dim, "metric": args.metric,
                "index_type": args.index, "params": args.params,
                "expected_count": args.expected_count}
        if args.pool:
            body["pool"] = args.pool
        out(c.post(base, body), COLS)
    elif args.action == "delete":
        c.delete(f"{base}{args.name}/")
    elif args.action == "build":
        job = c.post(f"{base}{args.name}/build/")
        if args.no_wait:
            out(job, JOB_COLS)
            return 0
        return watch_job(c, job["id"], args.json)
    elif args.action == "snapshot":
        out(c.post(f"{base}{args.name}/snapshots/", {"name": args.snapshot}),
            ["name", "collection", "vector_count", "path"])
    elif args.action == "search":
        body = {"vector": args.vector, "k": args.k}
        if args.filter is not None:
            body["filter"] = args.filter
        out(c.post(f"{base}{args.name}/search/", body)["results"], HIT_COLS)
    return 0

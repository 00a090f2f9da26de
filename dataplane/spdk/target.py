"""Run SPDK's ``nvmf_tgt``: find the binaries, start it without hugepages, stop it cleanly.

SPDK has no Debian package: ``scripts/build-spdk.sh`` builds the pinned release once per
machine into ``/var/cache/strata/spdk-v<version>-<hash>/`` and ``scripts/setup.sh`` links it
as ``<venv>/spdk``. :func:`spdk_binary` looks in ``$STRATA_SPDK_PREFIX/bin``, then there,
then on ``PATH`` (an SPDK a user installed by other means).

nvmf_tgt runs as a user-space process with no hugepages, no PCI access and no root-only
resources (the options of ../shared/RECIPES.md "SPDK v26.01")::

    nvmf_tgt --no-huge -s 256 -m 0x1 -u --interrupt-mode -r SOCK -c CONFIG.json
             --disable-cpumask-locks --num-trace-entries 0

Interrupt mode keeps an idle target off the CPU (a polling reactor burns a whole core). The
256 MiB of memory fits only with smaller buffer pools than SPDK's defaults: the start-up
config sets them (``iobuf_set_options``, ``bdev_set_options``), as the recipe's
``--wait-for-rpc`` sequence would, before the subsystems initialise. A new process holds no
pools or exports: the spdk driver re-creates the pools' base bdevs (SPDK then loads each lvol
store from its devices) and re-applies the NVMe-oF subsystems from its records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from plumbing.atomic import write_json_atomic
from plumbing.process import Child, ChildFailed, terminate

from ..driver import recorded_pools

PREFIX_ENV = "STRATA_SPDK_PREFIX"
MEMORY_MIB = 256
# Buffer pools that fit MEMORY_MIB (SPDK's defaults need about 512 MiB); the TCP transport's
# own buffer counts must fit these (see TCP_TRANSPORT).
START_CONFIG = {"subsystems": [
    {"subsystem": "iobuf", "config": [
        {"method": "iobuf_set_options",
         "params": {"small_pool_count": 2048, "large_pool_count": 256}}]},
    {"subsystem": "bdev", "config": [
        {"method": "bdev_set_options",
         "params": {"bdev_io_pool_size": 4096, "bdev_io_cache_size": 128}}]},
]}
TCP_TRANSPORT = {"trtype": "TCP", "max_queue_depth": 128, "num_shared_buffers": 127,
                 "buf_cache_size": 16}
DPDK_RUN_DIR = Path("/var/run/dpdk")


def target_dir(data_dir: str | os.PathLike) -> Path:
    """Where `strata up` keeps its nvmf_tgt's socket, config and log: ``<data_dir>/run/spdk``."""
    return Path(data_dir) / "run" / "spdk"


def has_spdk_pools(data_dir: str | os.PathLike) -> bool:
    """True when the data directory holds a pool record of the spdk driver."""
    return bool(recorded_pools(Path(data_dir) / "pools", "spdk"))


def spdk_prefix() -> Path | None:
    """The SPDK installation to use: ``$STRATA_SPDK_PREFIX``, else ``<venv>/spdk``."""
    for candidate in (os.environ.get(PREFIX_ENV), Path(sys.prefix) / "spdk"):
        if candidate and (Path(candidate) / "bin" / "nvmf_tgt").is_file():
            return Path(candidate)
    return None


def spdk_binary(name: str) -> str | None:
    """The path of SPDK program ``name`` (``nvmf_tgt``, ``spdk_dd``, ...), or None."""
    prefix = spdk_prefix()
    if prefix and (prefix / "bin" / name).is_file():
        return str(prefix / "bin" / name)
    return shutil.which(name)


def spdk_unavailable() -> str | None:
    """Why nvmf_tgt cannot be started here, or None."""
    if spdk_binary("nvmf_tgt") is None:
        failed = Path("/var/cache/strata/spdk-build-failed.log")
        return ("SPDK's nvmf_tgt is not built: run scripts/setup.sh (scripts/build-spdk.sh), "
                f"or set {PREFIX_ENV} to an SPDK installation"
                + (f"; the last build failed, see {failed}" if failed.exists() else ""))
    try:
        import spdk.rpc.client  # noqa: F401
    except ImportError:
        return "the spdk Python package is not installed (pip install spdk)"
    return None


def nvmf_tgt_argv(binary: str, rpc_socket: str | os.PathLike, config: str | os.PathLike) -> list:
    """The command line of a no-hugepages, interrupt-mode nvmf_tgt on one core."""
    return [binary, "--no-huge", "-s", str(MEMORY_MIB), "-m", "0x1", "-u", "--interrupt-mode",
            "--disable-cpumask-locks", "--num-trace-entries", "0",
            "-r", str(rpc_socket), "-c", str(config)]


def write_start_config(path: str | os.PathLike) -> Path:
    """Write nvmf_tgt's start-up config (the buffer pools above) to ``path``."""
    path = Path(path)
    write_json_atomic(path, START_CONFIG, indent=1)
    return path


def rpc_ready(rpc_socket: str | os.PathLike, timeout: float = 2.0) -> bool:
    """True once nvmf_tgt answers on its socket and its subsystems are initialised."""
    from spdk.rpc.client import JSONRPCClient, JSONRPCException

    if not os.path.exists(rpc_socket):
        return False
    try:
        client = JSONRPCClient(str(rpc_socket), timeout=timeout)
    except (JSONRPCException, OSError):
        return False
    lg = client.get_logger()
    lg.handlers[:] = lg.handlers[:1]
    lg.setLevel(100)
    try:
        client.call("framework_wait_init")
        return True
    except (JSONRPCException, OSError, ValueError):
        return False
    finally:
        client.close()


def run_app(argv: list, timeout: float) -> subprocess.CompletedProcess:
    """Run an SPDK program (spdk_dd, spdk_nvme_perf, ...) to its end, output and errors
    together in ``stdout``; DPDK's run directory of the process is removed after it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            out, _ = proc.communicate()
        clean_after(proc.pid)
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


def initiator_config(traddr: str, trsvcid, subnqn: str, hostnqn: str | None = None,
                     name: str = "remote", dhchap_key_file=None) -> dict:
    """The JSON config of an SPDK app (spdk_dd) used as an NVMe/TCP initiator: the small
    buffer pools of a no-hugepages start and one controller attached as bdev ``<name>n1``,
    authenticating with the DH-HMAC-CHAP key in ``dhchap_key_file`` (mode 0600) if given."""
    params = {"name": name, "trtype": "tcp", "adrfam": "ipv4", "traddr": traddr,
              "trsvcid": str(trsvcid), "subnqn": subnqn}
    if hostnqn:
        params["hostnqn"] = hostnqn
    config = json.loads(json.dumps(START_CONFIG))
    if dhchap_key_file:
        params["dhchap_key"] = "host-key"
        config["subsystems"].insert(0, {"subsystem": "keyring", "config": [
            {"method": "keyring_file_add_key",
             "params": {"name": "host-key", "path": str(dhchap_key_file)}}]})
    bdev = next(s for s in config["subsystems"] if s["subsystem"] == "bdev")
    bdev["config"].append({"method": "bdev_nvme_attach_controller", "params": params})
    return config


def clean_after(pid: int | None) -> None:
    """Remove what an nvmf_tgt process leaves behind: DPDK's ``/var/run/dpdk/spdk_pid<PID>``."""
    if pid:
        shutil.rmtree(DPDK_RUN_DIR / f"spdk_pid{pid}", ignore_errors=True)


class SpdkTarget:
    """One nvmf_tgt with its RPC socket, start-up config and log under ``state_dir``.

    ``start()`` returns once it answers JSON-RPC; ``stop()`` sends SIGTERM (SIGKILL after
    ``timeout``) and cleans up; ``kill()`` is ``kill -9`` for crash tests.
    """

    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        self.rpc_socket = self.state_dir / "spdk.sock"
        self.config = self.state_dir / "nvmf_tgt.json"
        self.log = self.state_dir / "nvmf_tgt.log"
        self.pid_file = self.state_dir / "nvmf_tgt.pid"
        self.child: Child | None = None

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child else None

    def argv(self) -> list:
        binary = spdk_binary("nvmf_tgt")
        if binary is None:
            raise FileNotFoundError(spdk_unavailable())
        return nvmf_tgt_argv(binary, self.rpc_socket, self.config)

    def prepare(self) -> None:
        """Before a start: the start-up config; no socket, and no DPDK run directory, left by
        the process that ran here before (it may have been killed)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_start_config(self.config)
        self.rpc_socket.unlink(missing_ok=True)
        try:
            old = int(self.pid_file.read_text())
        except (OSError, ValueError):
            old = None
        if old and not Path(f"/proc/{old}").exists():
            clean_after(old)
            self.pid_file.unlink(missing_ok=True)

    def record_pid(self) -> None:
        """Write the PID of the nvmf_tgt serving our socket (started by someone else, such as
        `strata up`'s supervisor) to ``nvmf_tgt.pid``."""
        needle = os.fsencode(self.rpc_socket)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in argv and argv[0].endswith(b"nvmf_tgt"):
                self.pid_file.write_text(proc.name)
                return

    def stop_process(self, proc, timeout: float = 10.0) -> None:
        """Stop an nvmf_tgt Popen of ours (SIGTERM, SIGKILL after ``timeout``), then clean up."""
        terminate(proc, timeout)
        clean_after(proc.pid)
        self.pid_file.unlink(missing_ok=True)

    def ready(self) -> bool:
        """Whether it answers JSON-RPC; its socket is then made root's alone (0600: SPDK
        makes it by the umask, and whoever may connect may drive the target)."""
        if not rpc_ready(self.rpc_socket):
            return False
        os.chmod(self.rpc_socket, 0o600)
        return True

    def start(self, timeout: float = 60.0) -> "SpdkTarget":
        """Start nvmf_tgt and wait until it answers (ChildFailed with its log's tail if not)."""
        self.prepare()
        self.child = Child("nvmf_tgt", self.argv(), self.log).start()
        self.pid_file.write_text(str(self.child.pid))
        try:
            self.child.wait_ready(self.ready, timeout, what=f"RPC socket {self.rpc_socket}",
                                  poll=0.1)
        except ChildFailed:
            self.stop()
            raise
        return self

    def running(self) -> bool:
        return self.child is not None and self.child.running()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``timeout`` s; then remove DPDK's run directory."""
        if self.child is None:
            return
        pid = self.child.pid
        self.child.stop(timeout)
        clean_after(pid)
        self.rpc_socket.unlink(missing_ok=True)
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """``kill -9`` (a crash): nothing is flushed or unloaded."""
        if self.running():
            pid = self.child.pid
            self.child.send_signal(9)
            self.child.wait_exit(10)
            clean_after(pid)

    def saved_config(self) -> dict:
        """The live target's whole configuration, as SPDK's ``rpc.py save_config`` writes it
        (``framework_get_config`` of each subsystem)."""
        from spdk.rpc.client import JSONRPCClient

        client = JSONRPCClient(str(self.rpc_socket), timeout=10)
        try:
            return {"subsystems": [
                {"subsystem": s["subsystem"],
                 "config": client.call("framework_get_config", {"name": s["subsystem"]})}
                for s in client.call("framework_get_subsystems")]}
        finally:
            client.close()


__all__ = ["SpdkTarget", "run_app", "initiator_config", "target_dir", "has_spdk_pools", "spdk_binary", "spdk_prefix", "spdk_unavailable", "nvmf_tgt_argv",
           "write_start_config", "rpc_ready", "clean_after", "START_CONFIG", "TCP_TRANSPORT"]

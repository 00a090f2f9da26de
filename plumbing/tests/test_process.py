"""plumbing.process: start, wait until ready or dead, log tail, stop (no Django)."""
import signal
import sys
import time

import pytest

from plumbing.process import (Child, ChildFailed, free_port, log_tail, port_open, terminate,
                              wait_for_port, wait_for_socket)

PY = sys.executable


def test_ready_on_a_port_then_stopped_by_sigterm(tmp_path):
    port = free_port()
    server = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', %d)); "
              "s.listen(); print('listening', flush=True); time.sleep(60)" % port)
    child = Child("srv", [PY, "-c", server], tmp_path / "log" / "srv.log").start()
    try:
        child.wait_ready(lambda: port_open("127.0.0.1", port), 20, "its port")
        assert child.running() and wait_for_port("127.0.0.1", port, 1, child)
        assert "listening" in child.tail()
    finally:
        assert child.stop(timeout=10) is False          # SIGTERM was enough
    assert child.returncode == -signal.SIGTERM and not child.running()


def test_a_child_that_dies_fails_at_once_with_its_log(tmp_path):
    child = Child("bad", [PY, "-c", "import sys; print('no config here'); sys.exit(3)"],
                  tmp_path / "bad.log").start()
    start = time.monotonic()
    with pytest.raises(ChildFailed) as exc:
        child.wait_ready(lambda: False, 30, "its port")
    assert time.monotonic() - start < 10
    assert exc.value.exited and exc.value.returncode == 3
    assert "no config here" in exc.value.tail and "exited with status 3" in str(exc.value)
    assert not wait_for_port("127.0.0.1", free_port(), 5, child)    # dead: no waiting


def test_not_ready_in_time_and_a_check_that_raises_is_not_ready(tmp_path):
    child = Child("slow", [PY, "-c", "import time; time.sleep(60)"], tmp_path / "s.log").start()
    try:
        with pytest.raises(ChildFailed) as exc:
            child.wait_ready(lambda: 1 / 0, 0.3)
        assert not exc.value.exited and "not ready" in str(exc.value)
    finally:
        child.stop()


def test_custom_stop_then_sigkill_for_a_child_that_ignores_sigterm(tmp_path):
    ignores = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('up', flush=True); time.sleep(60)")
    calls, errors = [], []

    def custom(proc):
        calls.append(proc.pid)
        raise RuntimeError("control socket gone")

    child = Child("stubborn", [PY, "-c", ignores], tmp_path / "x.log", stop=custom).start()
    child.wait_ready(lambda: "up" in child.tail(), 20)
    assert child.stop(timeout=0.5, on_error=errors.append) is True     # killed
    assert calls == [child.pid] and str(errors[0]) == "control socket gone"
    assert child.returncode == -signal.SIGKILL
    assert child.stop() is False                     # stopping a stopped child: nothing


def test_custom_stop_error_is_raised_without_on_error(tmp_path):
    def custom(proc):
        raise RuntimeError("boom")

    child = Child("c", [PY, "-c", "import time; time.sleep(60)"], tmp_path / "c.log",
                  stop=custom).start()
    with pytest.raises(RuntimeError, match="boom"):
        child.stop(timeout=5)
    assert not child.running()


def test_unix_socket_wait(tmp_path):
    sock = tmp_path / "d.sock"
    code = ("import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); "
            "s.listen(); time.sleep(60)")
    child = Child("d", [PY, "-c", code, str(sock)], tmp_path / "d.log").start()
    try:
        assert wait_for_socket(sock, 20, child)
    finally:
        terminate(child.proc, 5)
    assert not wait_for_socket(tmp_path / "none.sock", 0.2)


def test_log_tail(tmp_path):
    log = tmp_path / "l.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    assert log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert log_tail(tmp_path / "missing.log") == ""


def test_missing_program(tmp_path):
    with pytest.raises(FileNotFoundError):
        Child("x", ["/nonexistent/daemon"], tmp_path / "x.log").start()

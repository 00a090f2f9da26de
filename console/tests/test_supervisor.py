"""The supervisor of `strata up` on toy children (no appliance): a child killed with -9 is
started again and its restart and signal are recorded; one that keeps exiting at once is
given up, saying so."""
import os
import signal
import sys
import threading

from console.daemons import read_states
from console.supervisor import Supervisor
from plumbing.process import RestartPolicy
from tests.kit import wait_for


def test_policy_backs_off_then_gives_up_on_quick_exits_only():
    policy = RestartPolicy(backoff=0.5, max_backoff=4, stable_after=30, give_up_after=4)
    assert policy.exited(ran_for=3600) == 0.5       # ran well: start it again soon
    assert [policy.exited(ran_for=1) for _ in range(4)] == [1.0, 2.0, 4, None]
    policy = RestartPolicy(backoff=0.5, max_backoff=4, stable_after=30, give_up_after=9)
    assert [policy.exited(ran_for=1) for _ in range(5)] == [1.0, 2.0, 4, 4, 4]
    assert policy.exited(ran_for=60) == 0.5          # a good run forgives the quick exits


def test_killed_child_comes_back_and_a_crashing_one_is_given_up(tmp_path, capsys):
    for sub in ("run", "log"):
        (tmp_path / sub).mkdir()
    sup = Supervisor(tmp_path, dict(os.environ), policy=lambda: RestartPolicy(
        backoff=0.05, stable_after=20, give_up_after=3))
    sleeper = sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"])
    sup.start("crasher", [sys.executable, "-c", "import sys; sys.exit(3)"])
    watcher = threading.Thread(target=sup.watch)
    watcher.start()
    try:
        wait_for(lambda: read_states(tmp_path)["crasher"]["state"] == "failed", 30, "give up")
        first = sleeper.pid
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: read_states(tmp_path)["sleeper"]["restarts"] == 1
                 and read_states(tmp_path)["sleeper"]["state"] == "running", 30, "restart")
    finally:
        sup.stopping = True
        watcher.join(30)
        sup.stop_all()
    states = read_states(tmp_path)
    assert states["sleeper"]["last_exit"]["signal"] == "SIGKILL" and sleeper.pid != first
    assert states["sleeper"]["state"] == "stopped"
    crasher = states["crasher"]
    assert crasher["restarts"] == 2 and crasher["state"] == "failed"
    assert crasher["last_exit"] == {**crasher["last_exit"], "code": 3, "signal": None}
    out = capsys.readouterr().out
    assert "crasher exited (code 3) 3 times within 20 s of starting; not starting it again" \
        in out, out

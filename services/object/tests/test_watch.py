"""gateway/watch.py: inotify tells the gateway which of its files another process changed,
so a request checks none of them unless one did."""
from __future__ import annotations

import asyncio
import json
import os

from services.object.gateway import watch
from services.object.gateway.config import ConfigWatcher
from services.object.gateway.shared import Generation


def _replace(path, data: dict) -> None:
    """Write ``data`` as the plane does: a temporary file renamed over ``path``."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


async def _step() -> None:
    """Let the loop read what the kernel queued (the reader runs before the next task step)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def test_a_replaced_config_and_a_written_generation_are_seen_and_nothing_else(tmp_path):
    cfg = tmp_path / "gateway.json"
    _replace(cfg, {"data_root": str(tmp_path / "data"), "users": {}})

    async def run():
        notifier = watch.start(asyncio.get_running_loop())
        assert notifier is not None  # Linux: inotify is there
        try:
            config = ConfigWatcher(str(cfg))
            config.watch(notifier)
            generation = Generation(str(tmp_path / "data"))
            generation.watch(notifier)
            assert generation.changes() == set()  # the first call checks the file itself

            (tmp_path / "other.json").write_text("{}")  # another file of the directory
            await _step()
            assert config._watch.events == 0

            _replace(cfg, {"data_root": str(tmp_path / "data"), "users": {"NEW": {"secret_key": "s"}}})
            await _step()
            assert "NEW" in config.refresh()["users"]

            cfg.write_text(json.dumps({"data_root": str(tmp_path / "data"), "users": {"EDIT": {"secret_key": "s"}}}))
            await _step()  # edited in place: counted when the writer closed it
            assert "EDIT" in config.refresh()["users"]

            generation.bump("b1")
            await _step()
            assert generation.changes() == {"b1"}
            assert generation.changes() == set()

            # unwatched (no inotify): every call checks the file, no loop step needed
            config.watch(None)
            generation.watch(None)
            _replace(cfg, {"data_root": str(tmp_path / "data"), "users": {}})
            generation.bump("b2")
            assert config.refresh()["users"] == {} and generation.changes() == {"b2"}
        finally:
            notifier.close()

    asyncio.run(run())

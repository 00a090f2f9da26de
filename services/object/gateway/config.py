"""The gateway's configuration file, re-read whenever its mtime changes.

See services/object/README.md for the contract. Each request checks once (``refresh``), so a
new key works at once: one ``stat``, or, once the gateway watches the file (:mod:`.watch`),
none unless inotify reported a change; anything else reading the configuration (``current``)
checks at most every ``CHECK_INTERVAL`` seconds. A file that fails to parse keeps the previous
configuration in force (and is logged), so a half-written file can never lock every user out.
"""
from __future__ import annotations

import json
import logging
import os
import time

from plumbing.http_protocol import HttpLimits

log = logging.getLogger("strata.s3.config")
CHECK_INTERVAL = 1.0  # background readers; requests refresh() first
KEEP_ALIVE_SECONDS = 30.0  # an idle kept-alive connection is closed after this (config: http.keep_alive_timeout)


class ConfigError(Exception):
    """The configuration file is missing a required field or is not valid JSON."""


def parse_config(text: str, path: str = "config") -> dict:
    """Validate and normalise a configuration document."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be an object")
    if not data.get("data_root"):
        raise ConfigError(f"{path}: 'data_root' (directory for buckets and indexes) is required")
    users = data.get("users") or {}
    if not isinstance(users, dict):
        raise ConfigError(f"{path}: 'users' must map access keys to {{secret_key, user, admin}}")
    for key, user in users.items():
        if not isinstance(user, dict) or not user.get("secret_key"):
            raise ConfigError(f"{path}: user {key!r} needs a 'secret_key'")
    cold_root = data.get("cold_root")
    if cold_root is not None and (not isinstance(cold_root, str) or not os.path.isabs(cold_root)):
        raise ConfigError(f"{path}: 'cold_root' must be an absolute directory path (or absent)")
    budget = data.get("io_budget")
    if budget is not None and not isinstance(budget, dict):
        raise ConfigError(f"{path}: 'io_budget' must be an object {{rate, burst, classes, "
                          "foreground_share}}")
    kms = data.get("kms_keys")
    if kms is not None and not (isinstance(kms, list) and all(isinstance(k, str) for k in kms)) and not (
            isinstance(kms, dict) and all(isinstance(v, dict) for v in kms.values())):
        raise ConfigError(f"{path}: 'kms_keys' must be a list of key ids or map key ids to "
                          "{material, enabled, aliases, arn}")
    qos = data.get("qos")
    if qos is not None and not (isinstance(qos, dict) and isinstance(qos.get("shares", {}), dict)
                                and isinstance(qos.get("buckets", {}), dict)):
        raise ConfigError(f"{path}: 'qos' must be an object {{shares, buckets, slots, queue}}")
    store = data.get("store")
    if store is not None and not (isinstance(store, dict) and store.get("kind") in ("local", "rados")):
        raise ConfigError(f"{path}: 'store' must be an object with 'kind' 'local' or 'rados'")
    if store and store["kind"] == "rados" and not (isinstance(store.get("pool"), str) and store["pool"]
                                                   and isinstance(store.get("ceph_conf"), str)):
        raise ConfigError(f"{path}: a 'rados' store needs 'pool' and 'ceph_conf' (and 'client', 'keyring')")
    gather = data.get("commit_gather_ms")
    if gather is not None and (isinstance(gather, bool) or not isinstance(gather, (int, float))
                               or not 0 <= gather <= 100):
        raise ConfigError(f"{path}: 'commit_gather_ms' must be a number of milliseconds from 0 to 100")
    try:
        http_settings(data)
    except ValueError as exc:
        raise ConfigError(f"{path}: 'http': {exc}") from None
    data.setdefault("region", "us-east-1")
    data.setdefault("admin_token", "")
    data["users"] = users
    return data


def http_settings(config: dict) -> tuple[HttpLimits, float]:
    """(limits, keep-alive seconds) of the gateway's HTTP server from the config's ``http``
    object (read at start); ValueError says what is wrong."""
    if not isinstance(config.get("http") or {}, dict):
        raise ValueError("must be an object of limits")
    values = dict(config.get("http") or {})
    keep_alive = values.pop("keep_alive_timeout", KEEP_ALIVE_SECONDS)
    if isinstance(keep_alive, bool) or not isinstance(keep_alive, (int, float)) or keep_alive <= 0:
        raise ValueError(f"'keep_alive_timeout' must be a positive number of seconds, not {keep_alive!r}")
    return HttpLimits.from_mapping(values), float(keep_alive)


def _identity(st: os.stat_result) -> tuple:
    """What changes when the file is rewritten (a replace within one mtime tick changes the inode)."""
    return st.st_mtime_ns, st.st_ino, st.st_size


class ConfigWatcher:
    """Holds the current configuration; ``refresh()`` reloads it when the file changed."""

    def __init__(self, path: str):
        self.path = path
        self._seen = _identity(os.stat(path))
        with open(path) as fh:
            self.config = parse_config(fh.read(), path)
        self._checked = time.monotonic()
        self._watch = None   # a .watch.Watch of the file, once watch() was called

    def watch(self, notifier) -> None:
        """From now on check the file only when inotify reported a change (``notifier``: a
        :class:`.watch.Notifier`, or None: on every request), and in any case every
        CHECK_INTERVAL (a path inotify cannot follow, a symlink swapped elsewhere)."""
        self._watch = notifier.watch_name(self.path) if notifier is not None else None

    def current(self) -> dict:
        """The configuration in force (checked against the file at most every CHECK_INTERVAL)."""
        if time.monotonic() - self._checked >= CHECK_INTERVAL:
            return self._check()
        return self.config

    def refresh(self) -> dict:
        """The configuration in force, reloaded now if the file changed (one ``stat``; none
        when watched and inotify reported nothing since the last one)."""
        if self._watch is not None and not self._watch.changed():
            return self.current()
        return self._check()

    def _check(self) -> dict:
        self._checked = time.monotonic()
        try:
            seen = _identity(os.stat(self.path))
            if seen != self._seen:
                with open(self.path) as fh:
                    new = parse_config(fh.read(), self.path)
                if new["data_root"] != self.config["data_root"]:
                    log.warning("data_root changed in %s; restart the gateway to use it", self.path)
                    new["data_root"] = self.config["data_root"]
                self.config, self._seen = new, seen
                log.info("reloaded %s (%d users)", self.path, len(new["users"]))
        except (OSError, ConfigError) as exc:
            log.error("keeping previous configuration: %s", exc)
        return self.config

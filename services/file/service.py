"""Make ganesha.nfsd and smbd serve what the rows ask for, and record the outcome on the rows.

Every create/update/delete of an export or share saves the row, then calls :func:`sync_nfs`
or :func:`sync_smb`: under a lock shared by all the plane's processes, the WHOLE list of rows
is turned into runtime specs and applied (render -> validate -> write -> reload ->
health-check, in `services.file.runtime`). When the daemon refuses the new list, the old one
is put back and each changed row is tried alone on top of what is served: the ones refused
get ``state=error`` and the daemon's message in ``error`` while the previous config keeps
serving; the API answers 400 (refused config) or 503 (reload failed) for the row the
request changed. Nothing is swallowed.
"""
import grp
import logging
import os
import pwd
import stat
import subprocess

from django.conf import settings
from django.db import transaction

from plumbing.errors import Conflict, Invalid, StrataError, Unavailable
from services.file import daemons
from services.file.models import ApplyState, NfsExport, SmbShare, SmbUser
from services.file.runtime import (
    CommandError,
    ConfigValidationError,
    FileServiceError,
    FilesystemMissing,
    ensure_unix_user,
    resolve_share_path,
    set_smb_password,
    unix_user_exists,
)
from services.file.runtime import NfsExport as NfsExportSpec
from services.file.runtime import SmbShare as SmbShareSpec
from services.file.runtime import acl
from services.file.runtime.btrfs_mounts import is_mount_point
from services.file.runtime.smb_users import delete_smb_user as runtime_delete_smb_user
from services.file.runtime.smb_users import delete_unix_user
from services.nodes.public import served_here
from services.storage import service as storage

log = logging.getLogger(__name__)


class ApplyFailed(Unavailable):
    """The row is saved (state error) but the daemon could not apply it; the old config keeps
    serving."""

    code = "apply_failed"


class ApplyRefused(Invalid, ApplyFailed):
    """The row is saved (state error) but the daemon refused its config (the request is
    wrong); the old config keeps serving."""

    code = "apply_failed"


class CommandFailed(StrataError):
    """A system command (useradd, smbpasswd) failed; its stderr is in the message."""

    code = "command_failed"


def _options() -> dict:
    return getattr(settings, "SERVICE_OPTIONS", None) or {}


def nfs_server() -> daemons.PlaneNfsServer:
    """The plane's handle on this appliance's ganesha.nfsd."""
    return daemons.nfs_server(settings.DATA_DIR, _options())


def smb_server() -> daemons.PlaneSmbServer:
    """The plane's handle on this appliance's smbd."""
    return daemons.smb_server(settings.DATA_DIR, _options())


# -- rows -> runtime specs -----------------------------------------------------------------

def share_path(fs, path: str = "") -> str:
    """The real directory of ``path`` inside file system ``fs``; raises a runtime error."""
    if not fs.path:
        raise FilesystemMissing(f"file system {fs.name} has no directory (state {fs.state})")
    return resolve_share_path(fs.path, path or None)


def relative_path(fs, path: str = "") -> str:
    """``path`` normalized to a path relative to the root of ``fs`` ('' for the root)."""
    rel = os.path.relpath(share_path(fs, path), os.path.realpath(fs.path))
    return "" if rel == "." else rel


def _crosses(st: os.stat_result, user: str) -> bool:
    """Whether Unix user ``user`` may enter a directory with this stat (not as root)."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        return False
    if st.st_uid == account.pw_uid:
        return bool(st.st_mode & stat.S_IXUSR)
    groups = {account.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    if st.st_gid in groups:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def unreachable_by_users(path: str, users=()) -> str | None:
    """The first directory on the way to ``path`` that the SMB ``users`` (never root; with
    none named, any SMB user) cannot cross."""
    current = os.path.realpath(path)
    while True:
        try:
            st = os.stat(current)
        except OSError:
            return current
        if not (st.st_mode & stat.S_IXOTH or users and all(_crosses(st, u) for u in users)):
            return current
        if current == "/":
            return None
        current = os.path.dirname(current)


def ceph_relative_path(fs, path: str = "") -> str:
    """``path`` relative to the root of ``fs`` on a ceph pool: resolved through the pool's
    mount where this host has it (the plane), else (a cluster node, which reaches CephFS
    through libcephfs only) normalized as written, which the plane checked when it saved it."""
    if fs.path and os.path.isdir(fs.path):
        return relative_path(fs, path)
    rel = os.path.normpath((path or "").lstrip("/")) if path else ""
    if rel in (".", ""):
        return ""
    if rel == ".." or rel.startswith("../"):
        raise FilesystemMissing(f"path {path!r} is outside file system {fs.name}")
    return rel


def export_spec(exp: NfsExport) -> dict:
    """The runtime's REST shape of an export row (validated)."""
    source = storage.filesystem_source(exp.filesystem)
    spec = {"export_id": exp.pk, "pseudo": exp.pseudo, "clients": list(exp.clients),
            "snapshots": not exp.path}
    if source:  # a ceph pool: Ganesha reaches the directory through FSAL_CEPH
        rel = ceph_relative_path(exp.filesystem, exp.path)
        # the local path (the plane's ceph-fuse mount) only names the export: a node has none
        root = exp.filesystem.path or "/"
        spec["path"] = os.path.join(root, rel) if rel else root
        spec["ceph"] = dict(source, path=source["path"] + (f"/{rel}" if rel else ""))
        spec["snapshots"] = True  # CephFS shows .snapshots in every directory
    else:
        spec["path"] = share_path(exp.filesystem, exp.path)
    NfsExportSpec.from_dict(spec)
    return spec


def share_spec(share: SmbShare) -> dict:
    """The runtime's REST shape of a share row (validated); the quota is the share's size."""
    fs = share.filesystem
    spec = {"name": share.name, "path": share_path(fs, share.path),
            "read_only": share.read_only, "valid_users": list(share.valid_users),
            "encrypt": share.encrypt}
    if fs.quota_bytes and not share.path:
        spec["quota_bytes"] = fs.quota_bytes
    SmbShareSpec.from_dict(spec)
    return spec


# -- the reconcile step --------------------------------------------------------------------

def _placed(rows) -> list:
    """The rows this node serves (on a cluster node: those whose pool is placed here, see
    services.nodes.placement; elsewhere all)."""
    pools = {}
    out = []
    for row in rows:
        pool = row.filesystem.pool
        if pool.pk not in pools:
            pools[pool.pk] = served_here(pool, "file")
        if pools[pool.pk]:
            out.append(row)
    return out


class _Nfs:
    model, spec, runtime = NfsExport, staticmethod(export_spec), NfsExportSpec.from_dict
    server = staticmethod(nfs_server)
    rows = staticmethod(lambda: _placed(NfsExport.objects.select_related("filesystem__pool")))

    @staticmethod
    def prepare(server, rows, target, errors) -> None:
        """Bind-mount btrfs file systems (and their snapshots, read-only) onto themselves:
        Ganesha cannot export a subvolume that is not a mount point, nor walk into one."""
        for row in rows:
            if row.pk not in target:
                continue
            try:
                for path, read_only in _nfs_mounts(row.filesystem):
                    if not is_mount_point(path):
                        server.bind(path, read_only=read_only)
            except CommandError as exc:
                errors[row.pk] = exc

    @staticmethod
    def retire(server, specs: list[dict]) -> None:
        """Ganesha refuses to change an export's Path on a reload: first stop serving the
        exports whose path changed (a file system moved to another pool), so the apply that
        follows adds them anew with the same id and pseudo path."""
        state = server.settings.state_dir
        served = daemons.load_served(state)
        paths = {s["export_id"]: s["path"] for s in specs}
        keep = [s for s in served if paths.get(s["export_id"]) == s["path"]]
        if len(keep) < len([s for s in served if s["export_id"] in paths]):
            server.apply([NfsExportSpec.from_dict(s) for s in keep])
            daemons.save_served(state, keep)

    @staticmethod
    def finish(server, rows, target) -> None:
        needed = {path for r in rows if r.pk in target for path, _ in _nfs_mounts(r.filesystem)}
        busy = server.unbind_unused(needed)
        if busy:
            log.warning("file: bind mounts still busy, kept: %s", ", ".join(busy))


def _nfs_mounts(fs) -> list[tuple[str, bool]]:
    """(path, read_only) of the binds Ganesha needs for ``fs``: none unless it is btrfs."""
    if fs.pool.driver != "local" or not fs.path or not os.path.isdir(fs.path):
        return []
    mounts = [(os.path.realpath(fs.path), False)]
    for snap in fs.snapshots.all():
        if snap.path and os.path.isdir(snap.path):
            mounts.append((os.path.realpath(snap.path), True))
    return mounts


def refresh_nfs_snapshots(fs, bind: str | None = None, unbind: str | None = None) -> None:
    """Show a new snapshot of ``fs`` (``bind``) or release one (``unbind``) over NFS.

    Ganesha claims the file systems under an export only when it creates it, so the
    read-only ``.snapshots`` companion export of each export of ``fs`` is removed, the
    snapshot is (un)mounted, and the companion is added again; the writable exports and
    their clients are not touched. Raises CommandError (busy) or a runtime error.
    """
    server = nfs_server()
    ids = set(NfsExport.objects.filter(filesystem=fs, path="").values_list("pk", flat=True))
    with server.lock.held():
        served = daemons.load_served(server.settings.state_dir)
        companions = [s for s in served if s["export_id"] in ids and s.get("snapshots", True)]
        if companions:
            server.apply([NfsExportSpec.from_dict(dict(s, snapshots=False)
                                                  if s in companions else s) for s in served])
        try:
            if bind and not is_mount_point(bind):
                server.bind(os.path.realpath(bind), read_only=True)
            if unbind and os.path.realpath(unbind) in server.binds():
                server.unbind(os.path.realpath(unbind))
        finally:
            if companions:
                server.apply([NfsExportSpec.from_dict(s) for s in served])


class _Smb:
    model, spec, runtime = SmbShare, staticmethod(share_spec), SmbShareSpec.from_dict
    server = staticmethod(smb_server)
    rows = staticmethod(lambda: _placed(SmbShare.objects.select_related("filesystem__pool")))

    @staticmethod
    def prepare(server, rows, target, errors) -> None:
        if not os.path.exists(server.conf_path):
            server.prepare()

    @staticmethod
    def retire(server, specs: list[dict]) -> None:
        pass  # smbd takes a new path for a share on reload

    @staticmethod
    def finish(server, rows, target) -> None:
        pass


def _apply(kind, server, target: dict) -> None:
    specs = [target[pk] for pk in sorted(target)]
    kind.retire(server, specs)
    server.apply([kind.runtime(s) for s in specs])
    daemons.save_served(server.settings.state_dir, specs)


def _failure_of(exc: Exception) -> type[ApplyFailed]:
    """A refused config is the request's fault (Invalid); anything else the daemon's."""
    return ApplyRefused if isinstance(exc, (ConfigValidationError, ValueError)) else ApplyFailed


def _sync(kind) -> dict:
    """Apply every row of ``kind``; returns {row pk: exception} for the rows refused.

    Raises ApplyFailed (Unavailable) when even the rows already served cannot be applied (the
    daemon itself is in trouble); the rows changed are marked with the error first.
    """
    server = kind.server()
    with server.lock.held():
        rows = kind.rows()
        desired, errors = {}, {}
        for row in rows:
            try:
                desired[row.pk] = kind.spec(row)
            except FileServiceError as exc:
                errors[row.pk] = exc
        served = {r.pk: r.applied for r in rows if r.applied}
        target = {r.pk: desired.get(r.pk) or served.get(r.pk) for r in rows
                  if r.pk in desired or r.pk in served}
        kind.prepare(server, rows, target, errors)
        for pk in errors:
            desired.pop(pk, None)
        target = {pk: desired.get(pk) or served.get(pk) for pk in target
                  if pk in desired or pk in served}
        try:
            _apply(kind, server, target)
        except FileServiceError as whole:
            log.warning("file: %s refused the new list (%s); trying the changes one by one",
                        server.name, whole)
            target = dict(served)
            try:
                _apply(kind, server, target)
            except FileServiceError as exc:
                for pk, spec in desired.items():
                    if spec != served.get(pk):
                        errors[pk] = exc
                _record(kind, rows, desired, errors, target, server)
                raise ApplyFailed(f"{server.name} cannot apply even the current config: "
                                  f"{exc}") from exc
            for pk in sorted(desired):
                if desired[pk] == target.get(pk):
                    continue
                trial = {**target, pk: desired[pk]}
                try:
                    _apply(kind, server, trial)
                    target = trial
                except FileServiceError as exc:
                    errors[pk] = exc
        _record(kind, rows, desired, errors, target, server)
        kind.finish(server, rows, target)
        return errors


def _record(kind, rows, desired, errors, target, server) -> None:
    live = ApplyState.ONLINE if server.is_running() else ApplyState.PENDING
    for row in rows:
        if row.pk in errors:
            fields = {"state": ApplyState.ERROR, "error": str(errors[row.pk])}
        else:
            fields = {"state": live, "error": ""}
        fields["applied"] = target.get(row.pk)
        if any(getattr(row, k) != v for k, v in fields.items()):
            kind.model.objects.filter(pk=row.pk).update(**fields)


def sync_nfs() -> dict:
    """Make ganesha.nfsd serve every export row; {pk: error} of the refused ones."""
    return _sync(_Nfs)


def sync_smb() -> dict:
    """Make smbd serve every share row; {pk: error} of the refused ones."""
    return _sync(_Smb)


def _raise_for(row, errors: dict, what: str) -> None:
    exc = errors.get(row.pk)
    if exc is not None:
        raise _failure_of(exc)(f"{what} was saved but not applied (state error; the previous "
                               f"config keeps serving): {exc}")


# -- exports and shares --------------------------------------------------------------------

def save_export(exp: NfsExport) -> NfsExport:
    """Save an export row and apply it; ApplyFailed if the daemon refused it."""
    exp.save()
    _raise_for(exp, sync_nfs(), f"NFS export {exp.pseudo}")
    exp.refresh_from_db()
    return exp


def delete_export(exp: NfsExport) -> None:
    """Stop serving an export, then forget it (nothing changes if the daemon refuses)."""
    with transaction.atomic():
        exp.delete()
        sync_nfs()


def grant_share_access(fs, path: str, users: list[str]) -> None:
    """Let SMB ``users`` read and write the share's directory and what is made in it (POSIX
    access and default ACL entries); the owner, group and mode stay as they are."""
    if not users:
        raise Invalid("Name the valid users to grant access to (grant_access needs "
                      "valid_users).")
    directory = share_path(fs, path)
    try:
        acl.grant_users(directory, [pwd.getpwnam(u).pw_uid for u in users])
    except acl.AclUnsupported:
        raise Conflict(f"The file system under {directory} keeps no POSIX ACLs; give the file "
                       "system to the users instead (owner, group, mode).") from None
    except KeyError as exc:
        raise Conflict(f"SMB user {exc.args[0]} has no Unix account on this host; set its "
                       "password again to recreate it.") from None


def save_share(share: SmbShare) -> SmbShare:
    """Save a share row and apply it; ApplyFailed if the daemon refused it."""
    share.save()
    _raise_for(share, sync_smb(), f"SMB share {share.name}")
    share.refresh_from_db()
    return share


def delete_share(share: SmbShare) -> None:
    """Stop serving a share, then forget it."""
    with transaction.atomic():
        share.delete()
        sync_smb()


def follow_filesystem(fs, old_path: str) -> None:
    """``fs`` now lives at ``fs.path`` (a tier move): serve its exports and shares from there
    under the same pseudo paths and share names, and let go of ``old_path``.

    Rows name their file system, not a directory, so a sync re-renders them with the new
    path (Ganesha re-reads its exports; smbd reloads, then its clients of the moved shares
    are disconnected so they reconnect to the new path). Raises FileServiceError when a row
    of ``fs`` was refused (the daemon keeps serving the old path) or the old path's bind
    mount is still busy; the caller then points ``fs`` back and calls this again.
    """
    problems = []
    exports = {e.pk: e.pseudo for e in NfsExport.objects.filter(filesystem=fs)}
    if exports:
        errors = sync_nfs()
        problems += [f"NFS export {exports[pk]}: {exc}" for pk, exc in errors.items()
                     if pk in exports]
        nfs = nfs_server()
        real = os.path.realpath(old_path)
        busy = [p for p in nfs.binds() if p == real or p.startswith(real + "/")]
        if busy and not problems:
            with nfs.lock.held():
                busy = nfs.unbind_unused(set(nfs.binds()) - set(busy))
            problems += [f"{p} is still busy in Ganesha" for p in busy]
    shares = {s.pk: s.name for s in SmbShare.objects.filter(filesystem=fs)}
    if shares:
        errors = sync_smb()
        problems += [f"SMB share {shares[pk]}: {exc}" for pk, exc in errors.items()
                     if pk in shares]
        smb = smb_server()
        if not problems and smb.is_running():
            with smb.lock.held():
                for name in shares.values():
                    smb.close_share(name)
    if problems:
        raise FileServiceError(f"the exports and shares of {fs.name} could not follow it to "
                               f"{fs.path}: " + "; ".join(problems))


# -- SMB users -----------------------------------------------------------------------------

def _smb_ready_for_users(smb) -> None:
    if not os.path.exists(smb.conf_path):
        smb.prepare()


def create_smb_user(username: str, password: str) -> SmbUser:
    """A Unix account (no home, no shell) plus a Samba password; 409 for a foreign account."""
    smb = smb_server()
    with smb.lock.held():
        if unix_user_exists(username):
            raise Conflict(f"A Unix account named {username} already exists on this host and "
                           "is not managed by Strata; choose another user name.")
        _smb_ready_for_users(smb)
        created = False
        try:
            created = ensure_unix_user(username)
            set_smb_password(smb.conf_path, username, password)
        except CommandError as exc:
            if created:
                delete_unix_user(username)
            raise CommandFailed(str(exc)) from exc
        return SmbUser.objects.create(username=username, unix_created=created,
                                      state=ApplyState.ONLINE)


def set_smb_user_password(user: SmbUser, password: str) -> SmbUser:
    """Change an SMB user's password (the Unix account is made again if it went missing)."""
    smb = smb_server()
    with smb.lock.held():
        _smb_ready_for_users(smb)
        try:
            if user.unix_created:
                ensure_unix_user(user.username)
            set_smb_password(smb.conf_path, user.username, password)
        except CommandError as exc:
            raise CommandFailed(str(exc)) from exc
    SmbUser.objects.filter(pk=user.pk).update(state=ApplyState.ONLINE, error="")
    user.refresh_from_db()
    return user


def shares_of_user(username: str) -> list[str]:
    """Names of the shares that list ``username`` in their valid users."""
    return [s.name for s in SmbShare.objects.all() if username in (s.valid_users or [])]


def delete_smb_user(user: SmbUser) -> None:
    """Remove the passdb entry and the Unix account Strata made; 409 while a share lists it."""
    shares = shares_of_user(user.username)
    if shares:
        raise Conflict(f"SMB user {user.username} is a valid user of share(s) "
                       f"{', '.join(shares)}; remove it from them first.")
    smb = smb_server()
    with smb.lock.held():
        _smb_ready_for_users(smb)
        try:
            delete_smb_user_entry(smb.conf_path, user)
        except CommandError as exc:
            raise CommandFailed(str(exc)) from exc
        user.delete()


def delete_smb_user_entry(conf_path: str, user: SmbUser) -> None:
    """Remove ``user`` from the passdb, and its Unix account if Strata made it."""
    runtime_delete_smb_user(conf_path, user.username, remove_unix_user=user.unix_created)


def passdb_users(conf_path: str) -> set[str]:
    """User names in the passdb of ``conf_path``."""
    done = subprocess.run(["pdbedit", "-s", conf_path, "-L"], check=False,
                          capture_output=True, text=True, timeout=60)
    return {line.split(":", 1)[0] for line in done.stdout.splitlines() if ":" in line}


def reconcile_users() -> dict:
    """Unix accounts Strata made exist again; users missing from the passdb are errors."""
    smb = smb_server()
    result = {}
    with smb.lock.held():
        _smb_ready_for_users(smb)
        known = passdb_users(smb.conf_path)
        for user in SmbUser.objects.all():
            state, error = ApplyState.ONLINE, ""
            try:
                if user.unix_created:
                    ensure_unix_user(user.username)
                if user.username not in known:
                    state, error = ApplyState.ERROR, (
                        "not in Samba's password database (was the data directory restored "
                        "from elsewhere?): set the password again")
            except CommandError as exc:
                state, error = ApplyState.ERROR, str(exc)
            SmbUser.objects.filter(pk=user.pk).update(state=state, error=error)
            result[user.username] = state
    return result


def reconcile_all(force_reload: bool = False) -> dict:
    """Everything into the running daemons (each `strata up`); a summary for the log."""
    summary = {}
    for name, sync in (("nfs_exports", sync_nfs), ("smb_shares", sync_smb)):
        try:
            errors = sync()
            summary[name] = {"errors": {pk: str(e) for pk, e in errors.items()}}
        except ApplyFailed as exc:
            summary[name] = {"failed": str(exc)}
    if force_reload:
        # an export whose directory appeared since Ganesha started (pools mounted by the
        # bootstrap, btrfs binds made just now) is only picked up by a reload
        nfs = nfs_server()
        with nfs.lock.held():
            try:
                nfs.force_reload()
            except FileServiceError as exc:
                summary["nfs_reload"] = str(exc)
    summary["smb_users"] = reconcile_users()
    return summary

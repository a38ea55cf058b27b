"""PostgreSQL for Argo's workflow archive: Debian's `postgresql` package, one database cluster per state dir.

Why Debian's server and a cluster of our own: Argo Workflows archives finished workflows (and the
Argo Server reads them back) only in PostgreSQL or MySQL. The system's own cluster
(`/var/lib/postgresql`, port 5432) is left alone; `gpuaas cluster up --with argo` runs `initdb`
once into `<state>/postgres/data` and starts `postgres` on 127.0.0.1 on a free port, with its
socket in `<state>/postgres/run`, so two clusters and the system's never meet.

PostgreSQL refuses to run as root: run by root, the server runs as the Debian package's `postgres`
user, which owns the data folder and must be able to traverse the state dir (`ensure_traversable`);
run by another user, it runs as that user. Roles:
the superuser `postgres` (socket only, trust: reachable by root and the `postgres` user on this
machine) creates the role `argo` (password, scram-sha-256 over TCP) that owns the database `argo`;
Argo connects as `argo`, never as the superuser.

Durability is traded for speed as etcd's `--unsafe-no-fsync` does here (`fsync=off`): a throwaway
cluster on one machine.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVICE_USER = "postgres"
DATABASE = "argo"
ROLE = "argo"
TABLE = "argo_workflows"


class PostgresError(RuntimeError):
    """The archive's database could not be prepared; the message says what failed and what to do."""


def bin_dir() -> Path:
    """The newest installed server's programs (/usr/lib/postgresql/<major>/bin), or an error naming the package."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    if not found:
        raise PostgresError("expected PostgreSQL's server (/usr/lib/postgresql/<version>/bin/postgres, Debian package "
                            "`postgresql`), found none; run `make setup` (it installs it) or "
                            "`apt-get install -y postgresql`")
    return found[-1].parent


def run_as() -> str | None:
    """The user the server runs as: `postgres` when we are root (it refuses root), else ourselves (None)."""
    return SERVICE_USER if os.geteuid() == 0 else None


def _account() -> pwd.struct_passwd:
    if run_as() is None:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise PostgresError(f"expected the system user `{SERVICE_USER}` (created by the Debian package `postgresql`), "
                            "found none; run `apt-get install -y postgresql`") from None


def ensure_traversable(folder: Path, owned_from: Path) -> None:
    """Let the `postgres` user reach `folder`: `o+x` on our own folders from `owned_from` down.

    Folders above `owned_from` are not ours to change: if one of them is closed (pytest's
    /tmp/pytest-of-root is 0700), the error says to choose a state dir elsewhere.
    """
    folder, owned_from = folder.resolve(), owned_from.resolve()
    for ancestor in reversed(folder.parents):
        mode = ancestor.stat().st_mode
        if mode & stat.S_IXOTH:
            continue
        if ancestor == owned_from or owned_from in ancestor.parents:
            ancestor.chmod(mode | stat.S_IXOTH)
        else:
            raise PostgresError(f"expected the `{SERVICE_USER}` user to be able to traverse {ancestor} (it runs "
                                f"the archive's database in {folder}), found mode {stat.filemode(mode)}; choose a "
                                "--state-dir under a folder other users can traverse (the checkout, /tmp, /var/tmp)")


@dataclass(frozen=True)
class Postgres:
    """One database cluster: its folders, port and the password of the `argo` role."""

    directory: Path
    port: int

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory / "run"

    @property
    def password_file(self) -> Path:
        return self.directory / "argo-password"

    def password(self) -> str:
        """The `argo` role's password, generated once per state dir (readable by root only)."""
        if not self.password_file.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            self.password_file.write_text(secrets.token_urlsafe(24))
            self.password_file.chmod(0o600)
        return self.password_file.read_text().strip()

    def initialize(self, owned_from: Path) -> None:
        """`initdb` once (as `postgres`), and the socket folder, both owned by `postgres`."""
        account = _account()
        self.directory.mkdir(parents=True, exist_ok=True)
        if run_as() is not None:
            ensure_traversable(self.directory, owned_from)
            self.directory.chmod(self.directory.stat().st_mode | stat.S_IXOTH)
        for folder in (self.socket_dir,):
            folder.mkdir(exist_ok=True)
            os.chown(folder, account.pw_uid, account.pw_gid)
            folder.chmod(0o700)
        if (self.data / "PG_VERSION").exists():
            return
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir()
        os.chown(self.data, account.pw_uid, account.pw_gid)
        self.data.chmod(0o700)
        done = subprocess.run([str(bin_dir() / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                               "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"],
                              user=account.pw_uid, group=account.pw_gid, extra_groups=[], cwd="/",
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)
            raise PostgresError(f"expected initdb to create {self.data}, it exited with {done.returncode}: "
                                f"{(done.stderr or done.stdout).strip()[-800:]}")

    def argv(self) -> list[str]:
        """The server on 127.0.0.1:port, its socket in our folder, no fsync (see the module docstring)."""
        return [str(bin_dir() / "postgres"), "-D", str(self.data), "-p", str(self.port),
                "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.socket_dir}",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "logging_collector=off", "-c", "log_min_messages=warning"]

    def _psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run([str(bin_dir() / "psql"), "-h", str(self.socket_dir), "-p", str(self.port),
                               "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-tAc", sql],
                              capture_output=True, text=True, check=False, timeout=30)
        if done.returncode != 0:
            raise PostgresError(f"expected `psql -c {sql.split()[0]} ...` to succeed, it failed: "
                                f"{(done.stderr or done.stdout).strip()[-500:]}")
        return done.stdout.strip()

    def answers(self) -> str | None:
        """A readiness check: None once the server runs SQL over its socket, else what it said."""
        try:
            return None if self._psql("SELECT 1") == "1" else "SELECT 1 did not return 1"
        except (PostgresError, subprocess.TimeoutExpired) as error:
            return str(error)

    def ensure_archive_database(self) -> None:
        """Role `argo` (with this state dir's password) owning database `argo`; idempotent."""
        password = self.password().replace("'", "''")
        if self._psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}'") != "1":
            self._psql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'")
        else:
            self._psql(f"ALTER ROLE {ROLE} PASSWORD '{password}'")
        if self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'") != "1":
            self._psql(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")

    def archived_count(self) -> int:
        """Rows in Argo's archive table (0 before the controller created it)."""
        exists = self._psql("SELECT to_regclass('public.argo_archived_workflows') IS NOT NULL", DATABASE)
        return int(self._psql("SELECT count(*) FROM argo_archived_workflows", DATABASE)) if exists == "t" else 0

    def archive_stats(self) -> dict[str, int]:
        """What the archive holds: workflow rows, label rows, and both tables' size on disk (indexes and
        TOAST included), in bytes (benchmarks/scale.py: archive rows and size per 1,000 admissions)."""
        if self._psql("SELECT to_regclass('public.argo_archived_workflows') IS NOT NULL", DATABASE) != "t":
            return {"rows": 0, "labelRows": 0, "bytes": 0}
        rows = int(self._psql("SELECT count(*) FROM argo_archived_workflows", DATABASE))
        labels = int(self._psql("SELECT count(*) FROM argo_archived_workflows_labels", DATABASE))
        size = int(self._psql("SELECT pg_total_relation_size('argo_archived_workflows') + "
                              "pg_total_relation_size('argo_archived_workflows_labels')", DATABASE))
        return {"rows": rows, "labelRows": labels, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuaas.cluster.postgres STATE_DIR`: the archive's stats as JSON (for scripts that may not
    import gpuaas, such as benchmarks/scale.py)."""
    import argparse
    import json

    from gpuaas.cluster.state import ClusterState

    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.postgres", description=main.__doc__)
    parser.add_argument("state_dir", type=Path, help="a cluster started with `gpuaas cluster up --with argo`")
    args = parser.parse_args(argv)
    state = ClusterState.load(args.state_dir)
    if state is None or "postgres" not in state.ports:
        parser.error(f"expected a cluster with the argo part in {args.state_dir}, found none")
    print(json.dumps(Postgres(args.state_dir / "postgres", state.ports["postgres"]).archive_stats()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A throwaway PostgreSQL server for the tests: initdb and pg_ctl in a temporary folder, stopped at the end.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` system user that Debian's
package creates. It listens on 127.0.0.1 at a free port with `trust` login: only this machine reaches it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PG_ROOT = Path("/usr/lib/postgresql")
SUPERUSER = "postgres"


@dataclass
class PostgresServer:
    """One running server; `url(name)` is a SQLAlchemy URL for one of its databases."""

    bin_dir: Path
    data_dir: Path
    port: int
    run_as: str | None  # the system user the server runs as; None: the current user

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def psql(self, sql: str, database: str = "postgres") -> str:
        command = [str(self.bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER]
        command += ["-d", database, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def _pg_ctl(self, *args: str) -> None:
        _run_as(self.run_as, [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", *args])


def find_bin_dir() -> Path | None:
    """The newest installed /usr/lib/postgresql/<version>/bin holding initdb, if any."""
    versions = sorted(PG_ROOT.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name), reverse=True)
    return versions[0].parent if versions else None


def why_not_available() -> str | None:
    """None when a server can be started here, else the reason in one line."""
    if find_bin_dir() is None:
        return f"no initdb under {PG_ROOT}: install Debian's postgresql (make test does) to run PostgreSQL tests"
    if os.geteuid() == 0 and not _user_exists(SUPERUSER):
        return "running as root and there is no 'postgres' system user to run the server as"
    return None


def start_server() -> PostgresServer:
    """initdb a fresh cluster in a temporary folder and start it; the caller stops it."""
    bin_dir = find_bin_dir()
    run_as = SUPERUSER if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="pg-test-"))
    data_dir = root / "data"
    if run_as is not None:
        account = pwd.getpwnam(run_as)
        os.chown(root, account.pw_uid, account.pw_gid)
    _run_as(run_as, [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8"])
    server = PostgresServer(bin_dir, data_dir, _free_port(), run_as)
    # fsync off: a test server's data dies with it anyway. The socket stays in our folder, not /run.
    options = f"-p {server.port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off -c max_connections=200"
    server._pg_ctl("start", "-l", str(root / "server.log"), "-o", options)
    return server


def _run_as(user: str | None, command: list[str]) -> None:
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    subprocess.run(command, check=True, capture_output=True, cwd="/")


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

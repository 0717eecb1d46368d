"""A throwaway PostgreSQL cluster on a free port."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

from hotkeyd.testing._server import _Server, free_port, wait_for_port


def postgres_bindir() -> str | None:
    """Directory of Debian's PostgreSQL server binaries (``initdb``, ``postgres``), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_pg_version)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(initdb)) if initdb else None


def _pg_version(path: str) -> float:
    try:
        return float(path.split("/")[4])
    except ValueError:
        return 0.0


class PostgresServer(_Server):
    """A throwaway PostgreSQL cluster (``initdb`` + ``postgres``) on a free loopback port.

    PostgreSQL refuses to run as root, so when started by root the cluster belongs to
    the ``postgres`` system user (created by Debian's package) and the server runs as
    that user. Authentication is ``trust`` on 127.0.0.1 only; fsync is off (a test
    cluster, thrown away afterwards).
    """

    def __init__(self, port: int | None = None) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL is not installed (apt-get install -y postgresql)")
        self.bindir = bindir
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="hotkeyd-pg-")
        self.data = os.path.join(self.dir, "data")
        self._uid: int | None = None  # run the server as this user (root cannot)
        self._gid: int | None = None
        self._groups: list[int] | None = None
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise FileNotFoundError(
                    "PostgreSQL refuses to run as root and there is no 'postgres' user "
                    "(Debian's postgresql package creates it)"
                ) from None
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._uid, self._gid, self._groups = pw.pw_uid, pw.pw_gid, []
            self.user = "postgres"
        else:
            import getpass

            self.user = getpass.getuser()
        subprocess.run(
            [
                os.path.join(bindir, "initdb"),
                "-D",
                self.data,
                "-U",
                self.user,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.dir,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def start(self) -> None:
        with open(os.path.join(self.dir, "server.log"), "ab") as log:
            self.proc = subprocess.Popen(
                [
                    os.path.join(self.bindir, "postgres"),
                    "-D",
                    self.data,
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    self.dir,
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                user=self._uid,
                group=self._gid,
                extra_groups=self._groups,
            )
        wait_for_port(self.port, timeout=30.0)
        deadline = time.monotonic() + 30.0  # the port opens before recovery ends
        ready = [os.path.join(self.bindir, "pg_isready"), "-q", "-h", "127.0.0.1"]
        while subprocess.run([*ready, "-p", str(self.port)], check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL on port {self.port} not ready after 30 s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGINT: fast shutdown, clients cut off) and remove the cluster."""
        proc = self.proc
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)

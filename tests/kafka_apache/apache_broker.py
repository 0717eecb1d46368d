"""A real Apache Kafka broker (KRaft, single node) for the compatibility suite.

The jars come from Maven Central (``ops/apache-kafka/pom.xml``; ``make kafka-jars``
copies org.apache.kafka:kafka_2.13 and its dependencies to ``ops/apache-kafka/libs``,
cached under ``~/.m2``). The broker's storage is formatted the way kafka-storage.sh does
(``kafka.tools.StorageTool format``) and started with ``kafka.Kafka server.properties``
on free ports. ``console_producer`` pipes lines into ``kafka.tools.ConsoleProducer`` for
the tests that must produce faster than a Python producer can.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO

from hotkeyd.testing import free_port, wait_for_port

LIBS = Path(
    os.environ.get("HOTKEYD_KAFKA_LIBS", Path(__file__).parents[2] / "ops/apache-kafka/libs")
)
JVM = ["-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]


def jars_present() -> bool:
    return any(LIBS.glob("kafka_2.13-*.jar")) and shutil.which("java") is not None


class ApacheKafka:
    """``with ApacheKafka() as kb: kb.bootstrap`` -- a KRaft broker+controller on free ports."""

    def __init__(self) -> None:
        self.port = free_port()
        self.controller_port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="hotkeyd-apache-kafka-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, *args: str) -> list[str]:
        log4j = self.dir / "log4j.properties"
        return [
            "java",
            *JVM,
            f"-Dlog4j.configuration=file:{log4j}",
            "-Dkafka.logs.dir=" + str(self.dir / "logs"),
            "-cp",
            f"{LIBS}/*",
            *args,
        ]

    def start(self) -> None:
        props = self.dir / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={self.dir / 'data'}",
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "log.message.timestamp.type=CreateTime",
                    "log.retention.ms=-1",  # replay tests write records stamped in 2025
                    "",
                ]
            )
        )
        (self.dir / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.dir / 'broker.log'}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            # joins, rebalances and assignments: what a failed group test needs to show
            "log4j.logger.kafka.coordinator.group=INFO\n"
            "log4j.logger.org.apache.kafka.coordinator.group=INFO\n"
        )
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(props)),
            check=True,
            capture_output=True,
            timeout=120,
        )
        self._stderr = open(self.dir / "stderr.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(props)), stdout=subprocess.DEVNULL, stderr=self._stderr
        )
        try:
            wait_for_port(self.port, timeout=90)
            self._wait_ready(90)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """The port opens before the broker has joined its own quorum: wait for metadata."""
        from kafka import KafkaAdminClient

        end = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < end:
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
                try:
                    admin.list_topics()
                    return
                finally:
                    admin.close()
            except Exception as exc:
                last = exc
                time.sleep(0.5)
        raise RuntimeError(f"Apache Kafka did not become ready: {last}; see {self.dir}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ApacheKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def console_producer(self, topic: str, *props: str) -> subprocess.Popen[bytes]:
        """``kafka.tools.ConsoleProducer``: one record per line written to its stdin."""
        args = [
            "kafka.tools.ConsoleProducer",
            "--bootstrap-server",
            self.bootstrap,
            "--topic",
            topic,
        ]
        for p in ("linger.ms=5", "batch.size=262144", "acks=1", *props):
            args += ["--producer-property", p]
        return subprocess.Popen(self._java(*args), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)


def create_topic(bootstrap: str, name: str, partitions: int = 4, timeout: float = 30.0) -> None:
    """Create ``name`` and wait until the broker's metadata lists all its partitions.

    KRaft answers CreateTopics before the metadata a client fetches lists the topic; a
    consumer group joined in between gets an empty assignment until its next metadata
    refresh (minutes), so the tests wait here.
    """
    import kafka_testutil
    from kafka import KafkaConsumer

    kafka_testutil.create_topic(bootstrap, name, partitions=partitions)
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(c.partitions_for_topic(name) or ()) == partitions:
                return
            time.sleep(0.1)
            c.topics()  # refresh
        raise RuntimeError(f"topic {name} did not show {partitions} partitions in {timeout:g}s")
    finally:
        c.close()

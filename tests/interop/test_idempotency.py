"""One idempotency key, four languages: begun in one, completed in another, replayed in a third.

Each client's guard runs in its own process (Go: ``clients/go/examples/idemapp``, Node:
``clients/node/examples/idemapp.ts``, Java: ``io.hotkeyd.examples.IdemApp``; protocol in
the Go app's comment) and the Python guard in this process, all on one real redis-server.
They share nothing but the Lua scripts of spec/lua and the records those write, so this
proves the records, fingerprints, fencing tokens and lease semantics agree.

Cost: about 3 s once the apps are built (the Java build is the long part, shared with the
other interop tests when they run in the same session).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from hotkeyd.idempotency import IdempotencyGuard, Lease, Outcome
from hotkeyd.idempotency.errors import IdempotencyUnavailable, LeaseLostError
from hotkeyd.testing import RedisServer

from .apps import ROOT, _need, _run

LANGS = ("python", "go", "node", "java")
LEASE_MS = 300  # short, so that the takeover case waits little


def _command(lang: str, tmp: Path) -> list[str]:
    if lang == "go":
        exe = tmp / "idemapp-go"
        _run([_need("go"), "build", "-o", str(exe), "./examples/idemapp"], ROOT / "clients" / "go")
        return [str(exe)]
    if lang == "node":
        npm, node_dir = _need("npm"), ROOT / "clients" / "node"
        if not (node_dir / "node_modules").is_dir():
            _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], node_dir)
        _run([npm, "run", "build", "--silent"], node_dir)
        return [_need("node"), str(node_dir / "dist" / "examples" / "idemapp.js")]
    java_dir, cp_file = ROOT / "clients" / "java", tmp / "idem-java-classpath.txt"
    _run([_need("mvn"), "-q", "-B", "-DskipTests", "compile", "dependency:build-classpath",
          f"-Dmdep.outputFile={cp_file}"], java_dir)  # fmt: skip
    classpath = os.pathsep.join([str(java_dir / "target" / "classes"), cp_file.read_text().strip()])
    return [_need("java"), "-cp", classpath, "io.hotkeyd.examples.IdemApp"]


class Peer:
    """One language's guard, spoken to with the idemapp protocol."""

    def __init__(self, lang: str, url: str, tmp: Path) -> None:
        self.lang = lang
        self.proc: subprocess.Popen[str] | None = None
        if lang == "python":
            self.guard = IdempotencyGuard(
                redis.Redis.from_url(url), lease=LEASE_MS / 1000, ttl=3600
            )
            return
        self.err = (tmp / f"idem-{lang}.err").open("w")
        self.proc = subprocess.Popen(
            [*_command(lang, tmp), "--url", url, "--lease-ms", str(LEASE_MS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )

    def __call__(self, **req: Any) -> dict[str, Any]:
        if self.proc is None:
            return self._python(req)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"{self.lang} app exited: {self.proc.poll()}"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _python(self, req: dict[str, Any]) -> dict[str, Any]:
        g = self.guard
        if req["op"] == "begin":
            b = g.begin(req["key"], req["fp"])
            if b.outcome is Outcome.NEW:
                assert b.lease is not None
                return {"outcome": "new", "token": str(b.lease.token), "takeover": b.takeover}
            if b.outcome is Outcome.DONE:
                return {"outcome": "done", "result": (b.result or b"").decode(), "failed": b.failed}
            if b.outcome is Outcome.IN_PROGRESS:
                return {"outcome": "in_progress", "retry_after_ms": round(b.retry_after * 1000)}
            return {"outcome": "mismatch"}
        record = g.settings.prepare(req["key"], b"").record
        lease = Lease(req["key"], record, int(req["token"]))
        try:
            if req["op"] == "complete":
                g.complete(lease, req.get("result", "").encode())
            elif req["op"] == "fail":
                g.fail(lease, req.get("result", "").encode())
            elif req["op"] == "release":
                g.release(lease)
            else:
                g.extend(lease)
        except LeaseLostError:
            return {"error": "lease_lost"}
        except IdempotencyUnavailable:
            return {"error": "unavailable"}
        return {"ok": True}

    def close(self) -> None:
        if self.proc is None:
            self.guard.client.close()
            return
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.err.close()


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Peer]]:
    tmp = tmp_path_factory.mktemp("idem-interop")
    with RedisServer() as rs:
        started = {lang: Peer(lang, rs.url, tmp) for lang in LANGS}
        try:
            yield started
        finally:
            for p in started.values():
                p.close()


@pytest.mark.integration
@pytest.mark.timeout(900)  # the first run builds the Go, Node and Java apps
def test_begin_complete_replay_across_every_triple(peers: dict[str, Peer]) -> None:
    for a, b, c in itertools.permutations(LANGS, 3):
        key, where = f"xl:{a}:{b}:{c}", f"begun in {a}, completed in {b}, replayed in {c}"
        began = peers[a](op="begin", key=key, fp="body-1")
        assert began["outcome"] == "new" and not began["takeover"], where
        assert peers[b](op="begin", key=key, fp="body-1")["outcome"] == "in_progress", where
        assert peers[c](op="begin", key=key, fp="body-2") == {"outcome": "mismatch"}, where
        assert peers[b](op="complete", key=key, token=began["token"], result=f"{a}>{b}") == {
            "ok": True
        }, where
        replay = peers[c](op="begin", key=key, fp="body-1")
        assert replay == {"outcome": "done", "result": f"{a}>{b}", "failed": False}, where
        assert peers[a](op="complete", key=key, token=began["token"], result="again") == {
            "error": "lease_lost"
        }, where


@pytest.mark.integration
def test_takeover_fences_the_old_holder_in_every_language(peers: dict[str, Peer]) -> None:
    for i, a in enumerate(LANGS):
        b, c, d = (LANGS[(i + k) % len(LANGS)] for k in (1, 2, 3))
        key, where = f"fence:{a}", f"holder {a}, taken over by {b}, stale complete by {c}"
        old = peers[a](op="begin", key=key, fp="f")
        time.sleep(2 * LEASE_MS / 1000)  # the holder stalls past its lease
        new = peers[b](op="begin", key=key, fp="f")
        assert new["outcome"] == "new" and new["takeover"], where
        assert int(new["token"]) > int(old["token"]), where
        assert peers[c](op="extend", key=key, token=old["token"]) == {"error": "lease_lost"}
        assert peers[c](op="complete", key=key, token=old["token"], result="stale") == {
            "error": "lease_lost"
        }, where
        assert peers[d](op="fail", key=key, token=new["token"], result="declined") == {"ok": True}
        replay = peers[a](op="begin", key=key, fp="f")
        assert replay == {"outcome": "done", "result": "declined", "failed": True}, where


@pytest.mark.integration
def test_release_in_one_language_frees_the_key_for_another(peers: dict[str, Peer]) -> None:
    for a, b in itertools.permutations(LANGS, 2):
        key = f"release:{a}:{b}"
        first = peers[a](op="begin", key=key, fp="f")
        assert peers[b](op="release", key=key, token=first["token"]) == {"ok": True}
        again = peers[b](op="begin", key=key, fp="f")
        assert again["outcome"] == "new" and not again["takeover"], (a, b)
        assert int(again["token"]) > int(first["token"]), (a, b)

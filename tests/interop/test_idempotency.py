"""One idempotency key, four languages: begun in one, completed in another, replayed in a third.

Each client's guard runs in its own process (Go: ``clients/go/examples/idemapp``, Node:
``clients/node/examples/idemapp.ts``, Java: ``io.hotkeyd.examples.IdemApp``; protocol in
the Go app's comment) and the Python guard in this process, all on one real redis-server.
They share nothing but the Lua scripts of spec/lua and the records those write, so this
proves the records, fingerprints, fencing tokens and lease semantics agree.

Over HTTP, the same order API runs behind each language's middleware (Go ``net/http``,
Node ``node:http``, Java's servlet filter in Jetty, Python's WSGI middleware), each with its
default per-caller scope (the digest of the Authorization header): a response one stores
replays byte for byte from every other for the same caller, never for another caller, and
the order runs once.

Cost: about 21 s, of which 4 s are the tests and the rest the Go, Node and Java builds
(the Maven build is shared with the other interop tests of a session only in part).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import redis

from hotkeyd.idempotency import IdempotencyGuard, Lease, Outcome
from hotkeyd.idempotency.errors import IdempotencyUnavailable, LeaseLostError
from hotkeyd.idempotency.http import HttpPolicy
from hotkeyd.idempotency.wsgi import IdempotencyWSGIMiddleware
from hotkeyd.protocol.wire import Namespace
from hotkeyd.testing import RedisServer, free_port, wait_for_port

from .apps import ROOT, _need, _run

LANGS = ("python", "go", "node", "java")
LEASE_MS = 300  # short, so that the takeover case waits little


_classpath: list[str] = []


def _java_classpath(tmp: Path) -> str:
    """Main and test classes (IdemHttpApp runs Jetty, a test dependency), built once."""
    if not _classpath:
        java_dir, cp_file = ROOT / "clients" / "java", tmp / "idem-java-classpath.txt"
        _run([_need("mvn"), "-q", "-B", "test-compile", "dependency:build-classpath",
              f"-Dmdep.outputFile={cp_file}"], java_dir)  # fmt: skip
        target = java_dir / "target"
        _classpath.append(
            os.pathsep.join(
                [str(target / "classes"), str(target / "test-classes"), cp_file.read_text().strip()]
            )
        )
    return _classpath[0]


def _command(lang: str, tmp: Path) -> list[str]:
    if lang == "go":
        exe = tmp / "idemapp-go"
        _run([_need("go"), "build", "-o", str(exe), "./examples/idemapp"], ROOT / "clients" / "go")
        return [str(exe)]
    if lang == "node":
        npm, node_dir = _need("npm"), ROOT / "clients" / "node"
        installed = node_dir / "node_modules" / ".package-lock.json"  # written by npm ci
        lock = node_dir / "package-lock.json"
        if not installed.is_file() or installed.stat().st_mtime < lock.stat().st_mtime:
            _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], node_dir)
        _run([npm, "run", "build", "--silent"], node_dir)
        return [_need("node"), str(node_dir / "dist" / "examples" / "idemapp.js")]
    return [_need("java"), "-cp", _java_classpath(tmp), "io.hotkeyd.examples.IdemApp"]


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


# --------------------------------------------------------------------------- over HTTP


def _http_command(lang: str, tmp: Path) -> list[str]:
    if lang == "go":
        exe = tmp / "idemhttp-go"
        _run([_need("go"), "build", "-o", str(exe), "./examples/idemhttp"], ROOT / "clients" / "go")
        return [str(exe)]
    if lang == "node":
        _command("node", tmp)  # builds the package (examples included)
        return [_need("node"), str(ROOT / "clients" / "node" / "dist" / "examples" / "idemhttp.js")]
    return [_need("java"), "-cp", _java_classpath(tmp), "io.hotkeyd.IdemHttpApp"]


def _python_app(url: str, prefix: str) -> Any:
    """The same order API as the Go, Node and Java idemhttp apps, behind the WSGI middleware."""
    r = redis.Redis.from_url(url)

    def orders(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length).decode()
        n = r.incr(f"{prefix}:orders")
        out = (json.dumps({"order": n, "lang": "python", "request": body}) + "\n").encode()
        start_response(
            "201 Created",
            [("content-type", "application/json"), ("content-length", str(len(out))),
             ("x-app", "python")],
        )  # fmt: skip
        return [out]

    guard = IdempotencyGuard(r, namespace=Namespace(prefix), lease=10)
    policy = HttpPolicy(required={"/order"})  # keys scoped by the Authorization header
    return IdempotencyWSGIMiddleware(orders, guard, policy)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def http_apps(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RedisServer, dict[str, int]]]:
    tmp = tmp_path_factory.mktemp("idem-http")
    prefix = "xl-http"
    with RedisServer() as rs:
        ports = {lang: free_port() for lang in LANGS}
        server = make_server(
            "127.0.0.1", ports["python"], _python_app(rs.url, prefix), handler_class=_Quiet
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        procs, errs = [], []
        try:
            for lang in ("go", "node", "java"):
                err = (tmp / f"idemhttp-{lang}.err").open("w")
                errs.append(err)
                cmd = [*_http_command(lang, tmp), "--url", rs.url, "--port", str(ports[lang]),
                       "--prefix", prefix]  # fmt: skip
                procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err))
            for lang in ("go", "node", "java"):
                wait_for_port(ports[lang], timeout=60)
            yield rs, ports
        finally:
            server.shutdown()
            server.server_close()
            for p in procs:
                p.kill()
                p.wait(timeout=10)
            for e in errs:
                e.close()


def _post(port: int, key: str, body: str, user: str = "alice") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "POST",
            "/order",
            body=body.encode(),
            headers={
                "Idempotency-Key": key,
                "Authorization": f"Bearer {user}",
                "Content-Type": "application/json",
            },
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.mark.integration
@pytest.mark.timeout(900)  # the first run builds the apps
def test_a_response_stored_by_one_middleware_replays_from_every_other(
    http_apps: tuple[RedisServer, dict[str, int]],
) -> None:
    rs, ports = http_apps
    r = redis.Redis.from_url(rs.url)
    for a, b, c in itertools.permutations(LANGS, 3):
        key, where = f"http:{a}:{b}:{c}", f"stored by {a}, replayed by {b} and {c}"
        before = int(r.get("xl-http:orders") or 0)
        status, headers, body = _post(ports[a], key, '{"sku": 42}')
        assert status == 201 and headers["x-app"] == a, (where, status, body)
        assert json.loads(body)["lang"] == a and json.loads(body)["request"] == '{"sku": 42}'
        for replayer in (b, c):
            s2, h2, b2 = _post(ports[replayer], key, '{"sku": 42}')
            assert (s2, b2) == (201, body), (where, replayer, s2, b2)
            assert h2["idempotent-replayed"] == "true" and h2["x-app"] == a, (where, h2)
            assert h2["content-type"].startswith("application/json"), (where, h2)
        assert _post(ports[b], key, '{"sku": 43}')[0] == 422, where
        assert int(r.get("xl-http:orders") or 0) == before + 1, where  # it ran once
        s3, _, b3 = _post(ports[c], key, '{"sku": 42}', user="bob")  # another caller's key
        assert s3 == 201 and json.loads(b3)["lang"] == c, where
    r.close()

"""spec/limits.json is the one owner of the contract's limits, and Python reads it.

The vectors in spec/vectors/limits.json (a case just under and just over each limit)
run through the same entry points as the other vectors; the schemas must carry the same
numbers; and a changed copy of the file changes what the decoders accept.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

from hotkeyd.client import aio, subscriber
from hotkeyd.idempotency.errors import IdempotencyKeyError
from hotkeyd.idempotency.keys import IdempotencyNames, check_key
from hotkeyd.protocol import contract, limits
from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import DemandError, DemandReport
from hotkeyd.protocol.lines import parse_counted
from hotkeyd.protocol.wire import Namespace
from tests.sketch.conftest import load_native
from tests.spec import limit_vectors
from tests.spec.test_vectors import HOTSET, SUBSCRIBERS, load, run_hotset_case, vector_redis

__all__ = ["vector_redis"]  # the fixture, shared with test_vectors

SPEC = Path(__file__).resolve().parents[2] / "spec"
LIMITS = json.loads((SPEC / "limits.json").read_text(encoding="utf-8"))
VECTORS = load("limits.json")


def test_the_vectors_are_built_from_the_limits() -> None:
    """Stale vectors fail here: rerun ``python tests/spec/limit_vectors.py``."""
    assert (SPEC / "vectors" / "limits.json").read_text("utf-8") == limit_vectors.render(LIMITS)


def test_python_reads_the_spec_file() -> None:
    assert limits.limits() == {n: s["value"] for n, s in LIMITS["limits"].items()}
    assert contract.spec_dir().resolve() == SPEC.resolve()


def _annotated(node: Any, path: str = "") -> list[tuple[str, str, str, Any]]:
    """(where, keyword, limit, value) for every x-limits annotation of a schema."""
    out = []
    if isinstance(node, dict):
        for kw, name in node.get("x-limits", {}).items():
            out.append((path, kw, name, node.get(kw)))
        for k, v in node.items():
            out += _annotated(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _annotated(v, f"{path}/{i}")
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in (SPEC / "schema").glob("*.json")))
def test_the_schemas_carry_the_limits(name: str) -> None:
    found = _annotated(contract.schema(name))
    for where, kw, limit, value in found:
        assert value == LIMITS["limits"][limit]["value"], f"{name}{where}: {kw}"
    if name not in ("invalidation-v1.json", "watch-heartbeat-v1.json"):  # no capped field
        assert found, f"{name} names no limit"


@pytest.mark.parametrize("kind", sorted(SUBSCRIBERS))
@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_limit_vector(case: dict[str, Any], kind: str, vector_redis: redis.Redis) -> None:
    if "python" in case.get("skip", {}):
        pytest.skip(case["skip"]["python"])
    run_hotset_case(VECTORS, case, vector_redis, SUBSCRIBERS[kind])


@pytest.mark.parametrize("case", VECTORS["demand"], ids=[c["name"] for c in VECTORS["demand"]])
def test_demand_limit_vector(case: dict[str, Any]) -> None:
    """The daemon's decoder of demand reports."""
    data = json.dumps(case["data"]).encode("utf-8").ljust(case.get("pad_to", 0), b" ")
    if case["error"]:
        with pytest.raises(DemandError):
            DemandReport.loads(data)
    else:
        DemandReport.loads(data)


def test_count_and_key_limit_vectors() -> None:
    for c in VECTORS["counted_lines"]:
        got = parse_counted(c["line"].encode())
        assert (got and got[1]) == c["count"], c
    for c in VECTORS["auth"]:
        if c["error"]:
            with pytest.raises(ValueError):
                MessageAuth([c["key_utf8"].encode()])
        else:
            MessageAuth([c["key_utf8"].encode()])
    for c in VECTORS["idempotency_keys"]:
        if c["error"]:
            with pytest.raises(IdempotencyKeyError):
                check_key(c["key"])
        else:
            assert check_key(c["key"]) == c["key"]


@pytest.mark.parametrize("impl", ["native", "python"])
def test_counted_line_limit_in_the_sketch_cores(impl: str) -> None:
    """The C core's line parser (native/lines.c) cannot read the file: the vectors pin it."""
    if impl == "native":
        mod = load_native()
    else:
        from hotkeyd.sketch import _sketch_py as mod
    for c in VECTORS["counted_lines"]:
        sk = mod.HeavyKeeper(k=4, memory=1 << 16)
        got = sk.update_lines(c["line"].encode(), counted=True)
        assert got == ((c["count"], 0, 0) if c["count"] is not None else (0, 0, 1)), (impl, c)


NAMESPACE = load("namespace.json")


@pytest.mark.parametrize("case", NAMESPACE["cases"], ids=[c["name"] for c in NAMESPACE["cases"]])
def test_namespace_vector(case: dict[str, Any]) -> None:
    ns = Namespace(case.get("prefix", "hotkeyd"), case.get("channel"))
    idem = IdempotencyNames(ns.prefix)
    inst = case["instance"]
    got = {
        "events": ns.channel,
        "invalidate": ns.invalidate_channel,
        "watch": ns.watch_channel,
        "demand": ns.demand_channel(inst),
        "instances": ns.instances,
        "snapshot": ns.snapshot(inst),
        "history": ns.history,
        "idempotency_record": idem.record(case["digest"]),
        "idempotency_audit": idem.audit,
    }
    assert got == case["names"]


def test_a_changed_limits_file_changes_the_decoders(tmp_path: Path) -> None:
    """A copy of spec/ with lower limits, read by a fresh interpreter."""
    changed = json.loads(json.dumps(LIMITS))
    changed["limits"]["ttl_ms_max"]["value"] = 1000
    changed["limits"]["message_entries_max"]["value"] = 2
    changed["limits"]["count_max"]["value"] = 9
    for kind in ("schema", "lua"):
        (tmp_path / kind).symlink_to(SPEC / kind)
    (tmp_path / "limits.json").write_text(json.dumps(changed), encoding="utf-8")
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from hotkeyd.protocol import contract
        contract.spec_dir = lambda: Path({str(tmp_path)!r})
        from hotkeyd.client.subscriber import SubscriberCore
        from hotkeyd.protocol.lines import parse_counted
        from hotkeyd.protocol.wire import Message
        msg = Message.loads(
            '{{"v":1,"instance":"d1","seq":1,"ts":1,"full":true,"final":false,'
            '"hot":[{{"key":"a","rate":1,"rule":"r","ttl_ms":1001}}],'
            '"cool":[{{"key":"b"}},{{"key":"c"}}]}}',
            max_entries=SubscriberCore().max_entries,
        )
        print(msg.skipped, len(msg.hot), len(msg.cool), parse_counted(b"k\\t10"))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["2", "0", "1", "None"], out.stderr


@pytest.mark.parametrize(
    ("module", "cls"),
    [(subscriber, "Subscriber"), (aio, "AsyncSubscriber")],
    ids=["thread", "asyncio"],
)
def test_the_runner_fails_when_the_handler_skips_the_gap_resync(
    module: ModuleType, cls: str, tmp_path: Path, vector_redis: redis.Redis
) -> None:
    """The hot-set runner goes through the subscriber's on_message: break it, and it fails."""
    assert module.__file__ is not None
    src = Path(module.__file__).read_text(encoding="utf-8")
    good = "if msg is not None and self.on_event(msg):\n            self.after_resync("
    assert src.count(good) == 1, "the handler's gap check is not where this test expects it"
    scratch = tmp_path / f"scratch_{cls}.py"
    scratch.write_text(src.replace(good, good.replace("(msg):", "(msg) and False:")), "utf-8")
    spec = importlib.util.spec_from_file_location(scratch.stem, scratch)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[scratch.stem] = mod
    try:
        spec.loader.exec_module(mod)
        failures = []
        for case in HOTSET["cases"]:
            try:
                run_hotset_case(HOTSET, case, vector_redis, getattr(mod, cls))
            except AssertionError as exc:
                failures.append(str(exc))
    finally:
        del sys.modules[scratch.stem]
    assert any("want 'resynced'" in f for f in failures), failures

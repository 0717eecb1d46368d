"""The stale-read harness in the suite: 10^5 reads per language and topology (issue 25).

Each run has the four languages' read apps at once against one topology through the
whole timeline of ``harness.py`` (every writer kind on a quiet system, then the faults)
and asserts the mode's bound on staleness (available mode: the copy's TTL) and, on the
quiet phases, write visibility far below that bound (generous, so CI load cannot flake
it; the real figures are printed, and the 10^6-read runs of ``benchmarks/stale.py`` hold
the targets). Cost: about 2.5 min (both topologies at once) and 1 min sharded.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from .harness import STRICT_LEASE, TTL, Report, RunResult, have, reader_command, run

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

READS = int(os.environ.get("HOTKEYD_STALE_READS", "100000"))  # per language
RATE = 1700.0  # reads/s per app
SLACK = 1.0  # s over the TTL: a loaded CI box delays a refresh
VISIBLE = 0.25  # s: a generous bound on p99 write visibility (the targets are 10 / 5 ms)
STRICT_RATE = 250.0  # reads/s per strict app (a second app per language, single node)
STRICT_SLACK = 0.2  # s over the 300 ms lease: a loaded CI box delays the apps' clock checks
WATCH_FAULTS = ("fault:kill-watch", "fault:daemon-kill")  # the faults strict mode bounds


def _check(rep: Report) -> None:
    print("\n" + rep.text())
    worst = rep.worst()
    assert worst <= TTL + SLACK, f"a read {worst:.3f} s stale: past the TTL bound"
    direct = rep.lags(("direct", "cli", "lua"))
    sdk = rep.lags(("sdk",))
    assert direct and sdk, "no quiet writes measured"
    p99 = sorted(direct)[int(0.99 * (len(direct) - 1))]
    assert p99 <= VISIBLE, f"direct writes: p99 visibility {p99 * 1000:.0f} ms"
    p99 = sorted(sdk)[int(0.99 * (len(sdk) - 1))]
    assert p99 <= VISIBLE, f"SDK writes: p99 visibility {p99 * 1000:.0f} ms"
    for lang, s in rep.langs.items():
        strict = lang.endswith("/strict")
        want = 0.3 * READS * (STRICT_RATE / RATE if strict else 1.0)
        assert s.reads >= want, f"{lang} read too little: {s.reads}"
        if strict:  # strict reads go to Redis whenever a heartbeat is late: not counted
            continue
        # The target is 1 % (measured 0.18-0.52 % in the 10^6-read runs); a loaded CI box
        # once showed 5.1 % on the cluster, so the suite allows 10 % and prints the figure.
        assert s.hot_redis_excess <= 0.10 * max(1, s.hot_reads), (
            f"{lang}: {s.hot_redis_excess} Redis reads of hot keys beyond one per write"
        )


def _check_strict(rep: Report) -> None:
    """Strict mode: a write made while the watch was down (its connection killed, the
    daemon SIGKILLed) is served stale by no strict app past the 300 ms lease (+ slack),
    while the available apps of the same run stay bounded by the TTL only."""
    assert any(lang.endswith("/strict") for lang in rep.langs), "no strict app ran"
    worst = rep.worst_in(WATCH_FAULTS, strict=True)
    assert worst <= STRICT_LEASE + STRICT_SLACK, (
        f"strict mode: a read {worst * 1000:.0f} ms stale after a watch fault"
    )
    assert rep.worst(strict=False) <= TTL + SLACK


def test_no_read_staler_than_the_bound(tmp_path: Path, unique: str) -> None:
    """Single node and cluster at once (the CI budget): each its own Redis, daemon and apps;
    on the single node, a second app per language runs in strict mode (``_check_strict``)."""
    langs = have()
    for lang in langs:  # build every reader once, before the two runs start them
        reader_command(lang, tmp_path)
    results: dict[str, RunResult] = {}
    failures: list[BaseException] = []

    def one(topology: str) -> None:
        try:
            d = tmp_path / topology
            d.mkdir()
            strict_rate = STRICT_RATE if topology == "single" else 0.0
            results[topology] = run(topology, d, f"{unique}-{topology}", seconds=READS / RATE,
                                    rate=RATE, langs=langs, strict_rate=strict_rate)  # fmt: skip
        except BaseException as exc:  # re-raised below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(t,)) for t in ("single", "cluster")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    for topology in ("single", "cluster"):
        _check(Report(results[topology]))
    _check_strict(Report(results["single"]))


def test_sharded_pubsub_on_a_cluster(tmp_path: Path, unique: str) -> None:
    """Sharded pub/sub (SPUBLISH/SSUBSCRIBE), quiet writes only, a strict app per language
    beside the available one: the channel's shard is whichever owns its slot. Two misses this reproduced (copies served until the TTL):
    the daemon's watch sent SPUBLISH to the bus URL's node (MOVED for 2 namespaces of 3),
    and the Python subscriber read one message per blocking round over the shards."""
    res = run("cluster", tmp_path, unique, seconds=20, rate=RATE, langs=have(),
              kinds=("sdk", "direct"), faults=(), sharded=True,
              strict_rate=STRICT_RATE)  # fmt: skip
    rep = Report(res)
    print("\n" + rep.text())
    assert rep.worst() <= TTL + SLACK
    # strict apps follow the heartbeats over SSUBSCRIBE too (Java's did not: it served
    # nothing locally), and stay within the lease on these quiet phases
    for lang, s in rep.langs.items():
        if lang.endswith("/strict"):
            assert s.local > 0.5 * s.reads, f"{lang} served {s.local} of {s.reads} locally"
    assert rep.worst(strict=True) <= STRICT_LEASE + STRICT_SLACK
    for kinds in (("direct",), ("sdk",)):
        lags = sorted(rep.lags(kinds))
        assert lags, "no quiet writes measured"
        p99 = lags[int(0.99 * (len(lags) - 1))]
        assert p99 <= VISIBLE, f"{kinds[0]} writes: p99 visibility {p99 * 1000:.0f} ms"

"""Benchmark the hotkeyd top-k sketches against peers at equal memory.

Workload: seeded Zipf streams (benchmarks/zipf.py) of ``--events`` events over a
1M-key universe of 12-byte keys (``item:%07d``), for each ``--alpha``. Each
implementation is fed the stream in batches of ``--batch`` keys, two ways:

* ``update_many``: a list of keys per batch (peers: their bulk API or a loop);
* ``update_lines``: one newline-separated buffer per batch (the wire format;
  peers must split the buffer into Python objects first).

Peers: the PyPI ``heavykeeper`` package (Rust) and ``datasketches``
(``frequent_strings_sketch``), sized to the same memory budget (see
docs/sketch.md, "How peers are sized"), plus ``collections.Counter`` as the exact,
unbounded baseline. Ratios compare against the fastest sketch peer of the same
run (Counter is exact and unbounded, so it is reported but not a "peer").

Usage::

    python benchmarks/bench_sketch.py                      # full: 10M events, 3 repeats
    python benchmarks/bench_sketch.py --events 1000000 --alpha 1.0 --memory 65536
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zipf

from hotkeyd import sketch as hk_sketch

K = 100
RUST_BUCKET_BYTES = 16  # heavykeeper-rs Bucket { fingerprint: u64, count: u64 }
RUST_HEAP_ENTRY_BYTES = 96  # String (24) + heap copy (~32) + count (8) + hash-map slot (~32)
RUST_DECAY = 1 / 1.08  # same decay base as ours
DS_SLOT_BYTES = 42  # std::string (32, SSO for short keys) + uint64 weight + uint16 state


@dataclass
class Result:
    """One implementation on one (alpha, memory) cell."""

    name: str
    nbytes: int
    many: list[float] = field(default_factory=list)
    lines: list[float] = field(default_factory=list)
    p10: float = math.nan
    p100: float = math.nan
    are: float = math.nan
    peer: bool = True


class Impl:
    """Adapter: a fresh sketch per run, two feeding modes, and a top-k reader."""

    name = ""
    peer = True

    def __init__(self, memory: int) -> None:
        self.memory = memory

    def new(self) -> Any:
        raise NotImplementedError

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        raise NotImplementedError

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        raise NotImplementedError

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        raise NotImplementedError

    def nbytes(self, sk: Any) -> int:
        raise NotImplementedError


class Ours(Impl):
    peer = False

    def __init__(self, memory: int, cls: Any) -> None:
        super().__init__(memory)
        self.cls = cls
        self.name = f"hotkeyd {cls.__name__}"

    def new(self) -> Any:
        return self.cls(k=K, memory=self.memory, seed=0)

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        sk.update_many(batch)

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        sk.update_lines(buf)

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        return list(sk.topk(K))

    def nbytes(self, sk: Any) -> int:
        return int(sk.nbytes)


class RustHeavyKeeper(Impl):
    name = "heavykeeper (Rust)"

    def __init__(self, memory: int) -> None:
        super().__init__(memory)
        import heavykeeper

        self.mod = heavykeeper
        self.depth = 2
        self.width = max(
            1, (memory - K * RUST_HEAP_ENTRY_BYTES) // (self.depth * RUST_BUCKET_BYTES)
        )

    def new(self) -> Any:
        return self.mod.HeavyKeeper.with_seed(K, self.width, self.depth, RUST_DECAY, 0)

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        sk.add_bulk(sbatch)  # str only: the package rejects bytes

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        sk.add_bulk(buf.decode().split("\n"))

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        return [(k.encode(), int(c)) for k, c in sk.list()][:K]

    def nbytes(self, sk: Any) -> int:
        return self.width * self.depth * RUST_BUCKET_BYTES + K * RUST_HEAP_ENTRY_BYTES


class DataSketches(Impl):
    name = "datasketches frequent_strings"

    def __init__(self, memory: int) -> None:
        super().__init__(memory)
        import datasketches

        self.mod = datasketches
        self.lg = max(3, int(math.log2(memory / DS_SLOT_BYTES)))

    def new(self) -> Any:
        return self.mod.frequent_strings_sketch(self.lg)

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        update = sk.update
        for s in sbatch:  # no bulk API
            update(s)

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        update = sk.update
        for s in buf.decode().split("\n"):
            update(s)

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        items = sk.get_frequent_items(self.mod.frequent_items_error_type.NO_FALSE_NEGATIVES, 0)
        items = sorted(items, key=lambda t: (-t[1], t[0]))[:K]
        return [(t[0].encode(), int(t[1])) for t in items]

    def nbytes(self, sk: Any) -> int:
        return (1 << self.lg) * DS_SLOT_BYTES


class ExactCounter(Impl):
    name = "collections.Counter (exact)"
    peer = False

    def new(self) -> Any:
        return Counter()

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        sk.update(batch)

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        sk.update(buf.split(b"\n"))

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        return sorted(sk.items(), key=lambda kv: (-kv[1], kv[0]))[:K]

    def nbytes(self, sk: Any) -> int:
        return sys.getsizeof(sk) + len(sk) * (sys.getsizeof(b"item:0000000") + 28)


def _time(fn: Callable[[], None]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_cell(
    impls: Sequence[Impl],
    batches: list[list[bytes]],
    sbatches: list[list[str]],
    bufs: list[bytes],
    events: int,
    truth: list[tuple[bytes, int]],
    exact: Counter[bytes],
    repeats: int,
) -> list[Result]:
    results = []
    t10 = {k for k, _ in truth[:10]}
    t100 = {k for k, _ in truth[:100]}
    for impl in impls:
        res = Result(impl.name, 0, peer=impl.peer)
        sk: Any = None
        for _ in range(repeats):
            sk = impl.new()

            def many(sk: Any = sk, impl: Impl = impl) -> None:
                for b, s in zip(batches, sbatches, strict=True):
                    impl.feed_many(sk, b, s)

            res.many.append(events / _time(many))
            sk2 = impl.new()

            def lines(sk2: Any = sk2, impl: Impl = impl) -> None:
                for buf in bufs:
                    impl.feed_lines(sk2, buf)

            res.lines.append(events / _time(lines))
        top = impl.top(sk)
        res.nbytes = impl.nbytes(sk)
        res.p10 = len({k for k, _ in top[:10]} & t10) / 10
        res.p100 = len({k for k, _ in top[:100]} & t100) / 100
        res.are = sum(abs(c - exact[k]) / exact[k] for k, c in top) / max(1, len(top))
        results.append(res)
        print(f"    {impl.name}: done", file=sys.stderr)
    return results


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.1f}M"


def table(rows: list[tuple[float, int, list[Result]]]) -> str:
    out = [
        "| alpha | memory | implementation | update_many ev/s | x peer | update_lines ev/s "
        "| x peer | p@10 | p@100 | ARE top-100 | bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for alpha, memory, results in rows:
        peers = [r for r in results if r.peer]
        best_many = max((statistics.median(r.many) for r in peers), default=math.nan)
        best_lines = max((statistics.median(r.lines) for r in peers), default=math.nan)
        for r in results:
            m, li = statistics.median(r.many), statistics.median(r.lines)
            out.append(
                f"| {alpha} | {memory // 1024} KiB | {r.name} | {fmt_rate(m)} | "
                f"{m / best_many:.2f} | {fmt_rate(li)} | {li / best_lines:.2f} | {r.p10:.2f} | "
                f"{r.p100:.2f} | {r.are:.2e} | {r.nbytes} |"
            )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--universe", type=int, default=1_000_000)
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.8, 1.0, 1.2])
    ap.add_argument("--memory", type=int, nargs="+", default=[16384, 65536, 262144])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=65536, help="keys per update call")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-peers", action="store_true", help="only hotkeyd and Counter")
    args = ap.parse_args(argv)

    print(f"# hotkeyd sketch benchmark (implementation: {hk_sketch.IMPLEMENTATION})")
    print(
        f"events={args.events} universe={args.universe} k={K} repeats={args.repeats} "
        f"batch={args.batch} python={sys.version.split()[0]}\n"
    )
    have_rust = importlib.util.find_spec("heavykeeper") is not None
    have_ds = importlib.util.find_spec("datasketches") is not None
    rows = []
    for alpha in args.alpha:
        print(f"alpha={alpha}: generating stream", file=sys.stderr)
        keys = zipf.zipf_keys(args.events, args.universe, alpha, args.seed)
        exact = Counter(keys)
        truth = sorted(exact.items(), key=lambda kv: (-kv[1], kv[0]))[:K]
        ustr = [k.decode() for k in zipf.universe_keys(args.universe)]
        str_of = {k: s for k, s in zip(zipf.universe_keys(args.universe), ustr, strict=True)}
        batches = [keys[i : i + args.batch] for i in range(0, len(keys), args.batch)]
        sbatches = [[str_of[k] for k in b] for b in batches]
        bufs = [b"\n".join(b) for b in batches]
        for memory in args.memory:
            print(f"  memory={memory}", file=sys.stderr)
            impls: list[Impl] = [
                Ours(memory, hk_sketch.HeavyKeeper),
                Ours(memory, hk_sketch.CountMinTopK),
            ]
            if not args.no_peers:
                if have_rust:
                    impls.append(RustHeavyKeeper(memory))
                if have_ds:
                    impls.append(DataSketches(memory))
            if memory == args.memory[0]:
                impls.append(ExactCounter(memory))
            rows.append(
                (
                    alpha,
                    memory,
                    run_cell(
                        impls, batches, sbatches, bufs, args.events, truth, exact, args.repeats
                    ),
                )
            )
        del keys, batches, sbatches, bufs, exact
    print(table(rows))
    print(
        "\nx peer = median rate / median rate of the fastest sketch peer (heavykeeper, "
        "datasketches) in the same cell; Counter is exact and unbounded (shown once per alpha)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark the hotkeyd top-k sketches against peers at equal memory.

Workload: seeded Zipf streams (benchmarks/zipf.py) of ``--events`` events over a
``--universe`` of keys, for each skew ``--alpha`` and each key length ``--key-len``
(key ``i`` is ``item:`` + ``i`` zero-padded to the length). Each implementation is fed
the stream in batches of ``--batch`` keys, three ways:

* ``update_many``: a list of keys per batch (peers: their bulk API or a loop);
* ``update_lines``: one newline-separated buffer per batch (the wire format;
  peers must split the buffer into Python objects first);
* per call: a Python loop calling ``update(key)`` once per event (peers: their
  single-key call).

Peers: the PyPI ``heavykeeper`` package (Rust) and ``datasketches``
(``frequent_strings_sketch``), sized to the same memory budget (see
docs/sketch.md, "How peers are sized"). Rates are events per CPU second of the
process (``time.process_time``), not wall time. Repeats are **interleaved**: repeat r runs
every implementation once before repeat r+1 starts, so machine noise (other processes
on a shared box) hits all of them alike; rates are medians over repeats and the ratio
columns compare with the fastest peer of the same cell in the same run.

Usage::

    python benchmarks/bench_sketch.py                       # 2M events, 5 repeats, 64 KiB
    python benchmarks/bench_sketch.py --alpha 1.0 2.0 --key-len 12 --repeats 3
    python benchmarks/bench_sketch.py --memory 16384 65536 --counter   # + exact Counter
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
MODES = ("many", "lines", "call")


@dataclass
class Result:
    """One implementation on one (alpha, key length, memory) cell."""

    name: str
    nbytes: int = 0
    rates: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    p10: float = math.nan
    p100: float = math.nan
    are: float = math.nan
    peer: bool = True

    def median(self, mode: str) -> float:
        return statistics.median(self.rates[mode]) if self.rates[mode] else math.nan


class Impl:
    """Adapter: a fresh sketch per run, three feeding modes, and a top-k reader."""

    name = ""
    peer = True

    def __init__(self, memory: int, key_len: int) -> None:
        self.memory = memory
        self.key_len = key_len

    def new(self) -> Any:
        raise NotImplementedError

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        raise NotImplementedError

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        raise NotImplementedError

    def feed_call(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        raise NotImplementedError

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        raise NotImplementedError

    def nbytes(self, sk: Any) -> int:
        raise NotImplementedError


class Ours(Impl):
    peer = False

    def __init__(self, memory: int, key_len: int, cls: Any, adapt_keys: bool = False) -> None:
        super().__init__(memory, key_len)
        self.cls = cls
        self.adapt_keys = adapt_keys
        self.name = f"hotkeyd {cls.__name__}"

    def new(self) -> Any:
        if self.adapt_keys:
            return self.cls(k=K, memory=self.memory, seed=0, adapt_keys=True)
        return self.cls(k=K, memory=self.memory, seed=0)

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        sk.update_many(batch)

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        sk.update_lines(buf)

    def feed_call(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        update = sk.update
        for key in batch:
            update(key)

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        return list(sk.topk(K))

    def nbytes(self, sk: Any) -> int:
        return int(sk.nbytes)


class RustHeavyKeeper(Impl):
    name = "heavykeeper (Rust)"

    def __init__(self, memory: int, key_len: int) -> None:
        super().__init__(memory, key_len)
        import heavykeeper

        self.mod = heavykeeper
        self.depth = 2
        # Heap entries hold a heap copy of the key: charge its real length.
        entry = RUST_HEAP_ENTRY_BYTES - 32 + max(32, key_len)
        self.entry = entry
        self.width = max(1, (memory - K * entry) // (self.depth * RUST_BUCKET_BYTES))

    def new(self) -> Any:
        return self.mod.HeavyKeeper.with_seed(K, self.width, self.depth, RUST_DECAY, 0)

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        sk.add_bulk(sbatch)  # str only: the package rejects bytes

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        sk.add_bulk(buf.decode().split("\n"))

    def feed_call(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        add = sk.add
        for key in sbatch:
            add(key)

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        return [(k.encode(), int(c)) for k, c in sk.list()][:K]

    def nbytes(self, sk: Any) -> int:
        return self.width * self.depth * RUST_BUCKET_BYTES + K * self.entry


class DataSketches(Impl):
    name = "datasketches frequent_strings"

    def __init__(self, memory: int, key_len: int) -> None:
        super().__init__(memory, key_len)
        import datasketches

        self.mod = datasketches
        # Keys longer than the 15-byte SSO buffer live in a heap copy as well.
        self.slot = DS_SLOT_BYTES + (key_len + 1 if key_len > 15 else 0)
        self.lg = max(3, int(math.log2(memory / self.slot)))

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

    def feed_call(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        self.feed_many(sk, batch, sbatch)  # its only path is one call per key

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        items = sk.get_frequent_items(self.mod.frequent_items_error_type.NO_FALSE_NEGATIVES, 0)
        items = sorted(items, key=lambda t: (-t[1], t[0]))[:K]
        return [(t[0].encode(), int(t[1])) for t in items]

    def nbytes(self, sk: Any) -> int:
        return (1 << self.lg) * self.slot


class ExactCounter(Impl):
    name = "collections.Counter (exact)"
    peer = False

    def new(self) -> Any:
        return Counter()

    def feed_many(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        sk.update(batch)

    def feed_lines(self, sk: Any, buf: bytes) -> None:
        sk.update(buf.split(b"\n"))

    def feed_call(self, sk: Any, batch: list[bytes], sbatch: list[str]) -> None:
        for key in batch:
            sk[key] += 1

    def top(self, sk: Any) -> list[tuple[bytes, int]]:
        return sorted(sk.items(), key=lambda kv: (-kv[1], kv[0]))[:K]

    def nbytes(self, sk: Any) -> int:
        return sys.getsizeof(sk) + len(sk) * (sys.getsizeof(b"x" * self.key_len) + 28)


def _time(fn: Callable[[], None]) -> float:
    """CPU seconds of the process: on a shared machine wall time also counts the time
    other processes held the core, which hits whoever happened to run then."""
    gc.collect()
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


@dataclass
class Stream:
    """One (alpha, key length) stream, in every shape the modes need."""

    batches: list[list[bytes]]
    sbatches: list[list[str]]
    bufs: list[bytes]
    events: int
    exact: Counter[bytes]
    truth: list[tuple[bytes, int]]


def _key_name(i: int, key_len: int) -> bytes:
    """Key ``i`` of ``key_len`` bytes: ``item:`` + digits, or digits only under 12 bytes."""
    if key_len >= 12:
        return b"item:%0*d" % (key_len - 5, i)
    return b"%0*d" % (key_len, i)


def make_stream(
    events: int, universe: int, alpha: float, key_len: int, seed: int, batch: int
) -> Stream:
    ids = zipf.zipf_ids(events, universe, alpha, seed).tolist()
    names: dict[int, bytes] = {}
    strs: dict[bytes, str] = {}
    keys = []
    for i in ids:
        key = names.get(i)
        if key is None:
            key = names[i] = _key_name(i, key_len)
            strs[key] = key.decode()
        keys.append(key)
    exact = Counter(keys)
    truth = sorted(exact.items(), key=lambda kv: (-kv[1], kv[0]))[:K]
    batches = [keys[i : i + batch] for i in range(0, len(keys), batch)]
    sbatches = [[strs[k] for k in b] for b in batches]
    bufs = [b"\n".join(b) for b in batches]
    return Stream(batches, sbatches, bufs, events, exact, truth)


def run_cell(impls: Sequence[Impl], st: Stream, repeats: int, modes: Sequence[str]) -> list[Result]:
    """Interleaved repeats: each repeat runs every implementation and mode once."""
    results = [Result(impl.name, peer=impl.peer) for impl in impls]
    last: list[Any] = [None] * len(impls)
    for _ in range(repeats):
        for j, impl in enumerate(impls):
            res = results[j]
            for mode in modes:
                sk = impl.new()
                if mode == "many":

                    def run(sk: Any = sk, impl: Impl = impl) -> None:
                        for b, s in zip(st.batches, st.sbatches, strict=True):
                            impl.feed_many(sk, b, s)

                elif mode == "lines":

                    def run(sk: Any = sk, impl: Impl = impl) -> None:
                        for buf in st.bufs:
                            impl.feed_lines(sk, buf)

                else:

                    def run(sk: Any = sk, impl: Impl = impl) -> None:
                        for b, s in zip(st.batches, st.sbatches, strict=True):
                            impl.feed_call(sk, b, s)

                res.rates[mode].append(st.events / _time(run))
                if mode == modes[0]:
                    last[j] = sk
    t10 = {k for k, _ in st.truth[:10]}
    t100 = {k for k, _ in st.truth[:100]}
    for impl, res, sk in zip(impls, results, last, strict=True):
        top = impl.top(sk)
        res.nbytes = impl.nbytes(sk)
        res.p10 = len({k for k, _ in top[:10]} & t10) / 10
        res.p100 = len({k for k, _ in top[:100]} & t100) / 100
        res.are = sum(abs(c - st.exact[k]) / st.exact[k] for k, c in top) / max(1, len(top))
    return results


def fmt_rate(x: float) -> str:
    return "-" if math.isnan(x) else f"{x / 1e6:.1f}M"


def fmt_ratio(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def table(rows: list[tuple[float, int, int, list[Result]]]) -> str:
    out = [
        "| alpha | key len | memory | implementation | update_many ev/s | x peer "
        "| update_lines ev/s | x peer | per call ev/s | x peer | p@10 | p@100 | ARE top-100 "
        "| bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for alpha, key_len, memory, results in rows:
        peers = [r for r in results if r.peer]
        best = {m: max((r.median(m) for r in peers), default=math.nan) for m in MODES}
        for r in results:
            cols = []
            for m in MODES:
                v = r.median(m)
                cols += [fmt_rate(v), fmt_ratio(v / best[m] if best[m] else math.nan)]
            out.append(
                f"| {alpha} | {key_len} | {memory // 1024} KiB | {r.name} | {' | '.join(cols)} | "
                f"{r.p10:.2f} | {r.p100:.2f} | {r.are:.2e} | {r.nbytes} |"
            )
    return "\n".join(out)


def ratio_table(rows: list[tuple[float, int, int, list[Result]]], name: str) -> str:
    """The targets at a glance: our median / the fastest peer's median, per cell and mode."""
    out = [
        f"| alpha | key len | memory | {name} update_many | update_lines | per call "
        "| p@100 | fastest peer (many / per call) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for alpha, key_len, memory, results in rows:
        ours = next((r for r in results if r.name == name), None)
        peers = [r for r in results if r.peer]
        if ours is None or not peers:
            continue
        cells = []
        fastest = []
        for m in MODES:
            if math.isnan(ours.median(m)):
                cells.append("-")
                continue
            top = max(peers, key=lambda r: r.median(m))
            cells.append(f"{ours.median(m) / top.median(m):.2f}x")
            if m != "lines":
                fastest.append(f"{top.name.split()[0]} {fmt_rate(top.median(m))}")
        out.append(
            f"| {alpha} | {key_len} | {memory // 1024} KiB | {' | '.join(cells)} | "
            f"{ours.p100:.2f} | {' / '.join(fastest)} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--universe", type=int, default=1_000_000)
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.8, 1.0, 1.2, 1.5, 2.0])
    ap.add_argument("--key-len", type=int, nargs="+", default=[12, 34, 100])
    ap.add_argument("--memory", type=int, nargs="+", default=[65536])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=65536, help="keys per update call")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--no-peers", action="store_true", help="only hotkeyd")
    ap.add_argument(
        "--adapt-keys", action="store_true", help="hotkeyd sketches with adapt_keys=True"
    )
    ap.add_argument("--countmin", action="store_true", help="also hotkeyd CountMinTopK")
    ap.add_argument("--counter", action="store_true", help="also collections.Counter (exact)")
    args = ap.parse_args(argv)
    if min(args.key_len) < len(str(args.universe - 1)):
        ap.error("--key-len must hold the digits of the largest key id (--universe)")

    print(f"# hotkeyd sketch benchmark (implementation: {hk_sketch.IMPLEMENTATION})")
    print(
        f"events={args.events} universe={args.universe} k={K} repeats={args.repeats} "
        f"(interleaved, median) batch={args.batch} adapt_keys={args.adapt_keys} "
        f"python={sys.version.split()[0]}\n"
    )
    have_rust = importlib.util.find_spec("heavykeeper") is not None
    have_ds = importlib.util.find_spec("datasketches") is not None
    rows = []
    for alpha in args.alpha:
        for key_len in args.key_len:
            print(f"alpha={alpha} key_len={key_len}: generating stream", file=sys.stderr)
            st = make_stream(args.events, args.universe, alpha, key_len, args.seed, args.batch)
            for memory in args.memory:
                impls: list[Impl] = [Ours(memory, key_len, hk_sketch.HeavyKeeper, args.adapt_keys)]
                if args.countmin:
                    impls.append(Ours(memory, key_len, hk_sketch.CountMinTopK, args.adapt_keys))
                if not args.no_peers:
                    if have_rust:
                        impls.append(RustHeavyKeeper(memory, key_len))
                    if have_ds:
                        impls.append(DataSketches(memory, key_len))
                if args.counter:
                    impls.append(ExactCounter(memory, key_len))
                print(f"  memory={memory}", file=sys.stderr)
                rows.append((alpha, key_len, memory, run_cell(impls, st, args.repeats, args.modes)))
            del st
    print(table(rows))
    print(
        "\nx peer = median rate / median rate of the fastest sketch peer (heavykeeper, "
        "datasketches) in the same cell and mode; Counter is exact and unbounded.\n"
    )
    print(ratio_table(rows, "hotkeyd HeavyKeeper"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

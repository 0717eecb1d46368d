"""A/B two builds of the sketch's C core in one process, on the same streams.

Machine noise moves single rates by several percent from one process to the next (and
the key objects of a stream land at other addresses), so comparing two builds run one
after the other says little about a change worth a few percent. This script compiles
each variant of ``native/`` into its own extension module (the same sources and flags
as ``setup.py``, another module name), loads all of them into one process and runs
them interleaved on the same streams: repeat r runs every variant once before repeat
r+1 starts. A variant is the working tree or a git revision, optionally with C macros
overridden (``-D``; only macros under ``#ifndef`` in ``native/sketch.h`` and
``native/_sketchmodule.c`` can be, e.g.
``SK_DIRECT_NUM`` to turn the low-skew direct mode off). Overrides change only the C
build: the pure-Python twin no longer matches such a build bit for bit.

Usage::

    # speed: the working tree against HEAD~1, three cells
    python benchmarks/ab_sketch.py --variant tree --variant rev:HEAD~1 \\
        --cells 1.0:12:many,0.8:34:lines,0.8:12:call
    # precision@100 with and without direct mode at 16 KiB, Zipf 0.8 (32 runs each)
    python benchmarks/ab_sketch.py --variant tree --variant tree:SK_DIRECT_NUM=100000 \\
        --precision --alpha 0.8 --memory 16384

Ratios are against the first variant.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sketch import K, make_stream

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SOURCES = ("murmur3.c", "keyhash.c", "sketch.c", "lines.c", "_sketchmodule.c")
CFLAGS = ["-O3", "-std=c99", "-fno-strict-aliasing"]  # setup.py's, minus warnings


def _fetch_sources(spec: str, dest: Path) -> None:
    """Copy ``native/`` of the working tree (``tree``) or of a git revision (``rev:X``)."""
    if spec == "tree":
        shutil.copytree(ROOT / "native", dest)
        return
    if not spec.startswith("rev:"):
        raise SystemExit(f"variant source must be 'tree' or 'rev:<git revision>', not {spec!r}")
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", spec[4:], "native"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest.parent)], input=archive, check=True)
    (dest.parent / "native").rename(dest)


def build(spec: str, name: str, workdir: Path) -> ModuleType:
    """Compile variant ``spec`` (``tree`` or ``rev:X``, then ``:MACRO=VALUE,...``) as
    extension module ``name`` and import it."""
    source, defines = _parse_variant(spec)
    src = workdir / name
    _fetch_sources(source, src)
    module = (src / "_sketchmodule.c").read_text()
    module = module.replace("PyInit__sketch(void)", f"PyInit_{name}(void)")
    module = module.replace('"hotkeyd.sketch._sketch"', f'"{name}"')
    (src / "_sketchmodule.c").write_text(module)
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    out = workdir / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    flags = [f"-D{d}" for d in defines.split(",") if d]
    includes = [f"-I{sysconfig.get_paths()['include']}", f"-I{src}"]
    files = [str(src / s) for s in SOURCES]
    subprocess.run(
        [*cc, "-shared", "-fPIC", *CFLAGS, *flags, *includes, *files, "-o", str(out)], check=True
    )
    spec_ = importlib.util.spec_from_file_location(name, out)
    assert spec_ is not None and spec_.loader is not None
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    return mod


def _parse_variant(spec: str) -> tuple[str, str]:
    """``tree[:D=V,...]`` or ``rev:X[:D=V,...]`` -> (source, defines)."""
    if spec == "tree" or spec.startswith("tree:"):
        return "tree", spec[5:]
    if spec.startswith("rev:"):
        rev, _, defines = spec[4:].partition(":")
        return "rev:" + rev, defines
    raise SystemExit(f"variant must be tree[:D=V,...] or rev:<revision>[:D=V,...], not {spec!r}")


def speed(mods: Sequence[ModuleType], labels: Sequence[str], args: argparse.Namespace) -> None:
    for cell in args.cells.split(","):
        alpha, key_len, mode = cell.split(":")
        st = make_stream(args.events, 1_000_000, float(alpha), int(key_len), 0, args.batch)
        if mode == "fresh":  # every event its own bytes object, as keys decoded off the wire
            st.batches = [[bytes(bytearray(k)) for k in b] for b in st.batches]
        rates: list[list[float]] = [[] for _ in mods]
        for _ in range(args.repeats):
            for j, mod in enumerate(mods):
                sk = mod.HeavyKeeper(k=K, memory=args.memory, seed=0, adapt_keys=args.adapt_keys)
                gc.collect()
                t0 = time.process_time()
                _feed(sk, mode, st.batches, st.bufs)
                rates[j].append(st.events / (time.process_time() - t0))
        med = [statistics.median(r) for r in rates]
        cols = "  ".join(
            f"{lab} {m / 1e6:.1f} M/s ({m / med[0]:.3f})"
            for lab, m in zip(labels, med, strict=True)
        )
        print(f"alpha={alpha} key_len={key_len} {mode}: {cols}", flush=True)


def _feed(sk: Any, mode: str, batches: list[list[bytes]], bufs: list[bytes]) -> None:
    if mode in ("many", "fresh"):
        for b in batches:
            sk.update_many(b)
    elif mode == "lines":
        for buf in bufs:
            sk.update_lines(buf)
    elif mode == "call":
        update = sk.update
        for b in batches:
            for key in b:
                update(key)
    else:
        raise SystemExit(f"mode must be many, fresh, lines or call, not {mode!r}")


def precision(mods: Sequence[ModuleType], labels: Sequence[str], args: argparse.Namespace) -> None:
    """Mean precision@100 over stream seeds x sketch seeds (12-byte keys, update_many)."""
    got: list[list[float]] = [[] for _ in mods]
    for stream_seed in range(1, args.streams + 1):
        st = make_stream(args.events, 1_000_000, args.alpha, 12, stream_seed, 65536)
        truth = {k for k, _ in st.truth}
        for seed in range(args.seeds):
            for j, mod in enumerate(mods):
                sk = mod.HeavyKeeper(k=K, memory=args.memory, seed=seed)
                for batch in st.batches:
                    sk.update_many(batch)
                got[j].append(len({k for k, _ in sk.topk()} & truth) / K)
    n = len(got[0])
    cols = "  ".join(
        f"{lab} {statistics.mean(g):.4f} (min {min(g):.2f})"
        for lab, g in zip(labels, got, strict=True)
    )
    print(f"precision@100 alpha={args.alpha} memory={args.memory}, {n} runs each: {cols}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--variant",
        action="append",
        required=True,
        help="tree | rev:<git revision>, optionally :MACRO=VALUE[,MACRO=VALUE] (repeat)",
    )
    ap.add_argument(
        "--cells",
        default="1.0:12:many",
        help="alpha:key_len:mode,... (speed; mode many, fresh (update_many, every key a new "
        "object), lines or call)",
    )
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--memory", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=65536, help="speed: keys per update call")
    ap.add_argument(
        "--adapt-keys", action="store_true", help="speed: sketches with adapt_keys=True"
    )
    ap.add_argument("--precision", action="store_true", help="precision@100 instead of speed")
    ap.add_argument("--alpha", type=float, default=0.8, help="precision: the Zipf skew")
    ap.add_argument("--streams", type=int, default=8, help="precision: stream seeds")
    ap.add_argument("--seeds", type=int, default=4, help="precision: sketch seeds per stream")
    args = ap.parse_args(argv)
    if len(args.variant) < 2:
        raise SystemExit("give at least two --variant")
    for v in args.variant:
        _parse_variant(v)  # refuse a bad one before compiling anything
    with tempfile.TemporaryDirectory(prefix="hotkeyd-ab-") as tmp:
        labels = [f"v{i}" for i in range(len(args.variant))]
        mods = [build(v, f"_sketch_ab{i}", Path(tmp)) for i, v in enumerate(args.variant)]
        for lab, v in zip(labels, args.variant, strict=True):
            print(f"{lab} = {v}")
        if args.precision:
            precision(mods, labels, args)
        else:
            speed(mods, labels, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

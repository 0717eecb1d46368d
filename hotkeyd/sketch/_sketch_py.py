"""Pure-Python twin of the C sketch core (``native/sketch.c``).

Why a twin: it is the fallback where no compiler exists, and the oracle the tests
compare the C core against. It performs the same integer operations in the same
order as the C code (hash, row indexes, decay RNG draws, heap sifts, key-arena
admission), so for the same seed and the same input both give identical
``topk()``, ``estimate()`` and ``to_bytes()``. Any change here must be mirrored in
``native/sketch.c`` (and the parity tests will say so if it is not).

Thread safety: every public method takes the object's own lock (the native classes
rely on the GIL and mark a sketch busy during update_lines), so concurrent use from
threads never corrupts the sketch.
"""

from __future__ import annotations

import functools
import operator
import struct
import threading
import zlib
from collections.abc import Sequence
from typing import Any

from hotkeyd.errors import SerializationError, SketchError
from hotkeyd.protocol.keys import key_bytes
from hotkeyd.protocol.lines import parse_counted

_mmh3_hash: Any
try:
    from mmh3 import hash as _mmh3_hash
except ImportError:  # pragma: no cover - mmh3 is a dependency; kept for bare installs
    _mmh3_hash = None

__all__ = ["CountMinTopK", "HeavyKeeper", "murmur3_32", "sketch_hash", "window_sums"]

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
KIND_HEAVYKEEPER = 1
KIND_COUNTMIN = 2
MAX_K = 1 << 20
MAX_DEPTH = 16
MAX_CELLS = 1 << 27
MAX_KEY_LEN = 1 << 20
MAX_KEY_BYTES = 1 << 30
MIN_WIDTH = 8
COUNT_MAX = M32
OVERHEAD = 256
ENTRY_COST = 24
KEY_RESERVE_AVG = 32  # key bytes per entry when only width= is given
KEY_SHARE = 4  # default key store: memory // KEY_SHARE, capped at k * max_key_len
AGG_CAP = 4096  # distinct keys per pre-aggregation round (SK_AGG_CAP in C)
# A full round with distinct keys >= DIRECT_NUM/DIRECT_DEN of its events sends the next
# DIRECT_SPAN events straight to the sketch (SK_DIRECT_* in C; docs/sketch.md).
DIRECT_NUM = 5
DIRECT_DEN = 8
DIRECT_SPAN = 32768
DEFAULT_MEMORY = 65536
DEFAULT_DEPTH = {KIND_HEAVYKEEPER: 2, KIND_COUNTMIN: 4}
HK_SLOTS = 2  # slots per HeavyKeeper bucket (SK_HK_SLOTS in C)
CELL_SIZE = {KIND_HEAVYKEEPER: 8 * HK_SLOTS, KIND_COUNTMIN: 4}  # bytes per bucket
WORDS = {KIND_HEAVYKEEPER: HK_SLOTS, KIND_COUNTMIN: 1}  # stored words per bucket
DECAY_NUM = 25  # b = DECAY_DEN / DECAY_NUM = 1.08
DECAY_DEN = 27
SERIAL_VERSION = 6  # 6: 64-bit seed, keyed hash; 5: one 64-bit key hash, rows from it; 4: keys of 32+ bytes hashed by _long_hash; 3: space-eviction counter in the header; 2: two-slot buckets
MAGIC = b"HKSK"
_HEADER = struct.Struct("<4sHBBIIIIIIIIQIII")
HEADER_SIZE = _HEADER.size  # 60
HK_MAX_LEVELS = 640
HK_POW_BITS = 32


def _murmur3_py(data: bytes, seed: int) -> int:
    """MurmurHash3 x86_32, unsigned; used only when the mmh3 package is missing."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & M32
    n = len(data)
    nblocks = n // 4
    for i in range(0, nblocks * 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * c1) & M32
        k = ((k << 15) | (k >> 17)) & M32
        k = (k * c2) & M32
        h ^= k
        h = ((h << 13) | (h >> 19)) & M32
        h = (h * 5 + 0xE6546B64) & M32
    tail = data[nblocks * 4 :]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * c1) & M32
        k = ((k << 15) | (k >> 17)) & M32
        k = (k * c2) & M32
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    h ^= h >> 16
    return h


def murmur3_32(key: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``key``, unsigned (same as ``mmh3.hash(key, seed, signed=False)``)."""
    if _mmh3_hash is not None:
        return int(_mmh3_hash(key, seed, signed=False))
    return _murmur3_py(key, seed)


def _fmix64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    x ^= x >> 33
    return x


SHORT_KEY = 16  # keys shorter than this take the two-word path (HK_SHORT_KEY in keyhash.h)
_LH_P1 = 0xC2B2AE3D27D4EB4F
HashKey = tuple[int, int, tuple[int, ...]]  # (s64, step, t[0..17]): hk_key in keyhash.h


@functools.lru_cache(maxsize=256)
def _hash_key(seed: int) -> HashKey:
    """The hash's key of ``seed``: the next 20 SplitMix64 outputs from state ``seed``
    (``hk_key_init`` in native/keyhash.h): s64, the 18 masks, the step (odd)."""
    x, out = seed, []
    for _ in range(20):
        x = (x + 0x9E3779B97F4A7C15) & M64
        z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out[0], out[19] | 1, tuple(out[1:19])


def _mix(a: int, b: int, ka: int, kb: int) -> int:
    r = (a ^ ka) * (b ^ kb)
    return ((r & M64) ^ (r >> 64)) + (a ^ (((b << 32) | (b >> 32)) & M64))


def _hash64k(data: bytes, key: HashKey) -> int:
    """The 64-bit key hash, exactly as ``hk_key_hash64`` in C (spec in native/keyhash.h)."""
    n = len(data)
    s64, step, t = key
    if n < SHORT_KEY:
        if n >= 8:
            a = int.from_bytes(data[:8], "little")
            b = int.from_bytes(data[n - 8 :], "little")
        elif n >= 4:
            a = int.from_bytes(data[:4], "little")
            b = int.from_bytes(data[n - 4 :], "little")
        elif n:
            a = data[0] | (data[n >> 1] << 8) | (data[n - 1] << 16)
            b = 0
        else:
            a = b = 0
        lo = a ^ t[16]
        hi = b ^ t[17]
        r = lo * hi
        swapped = int.from_bytes(lo.to_bytes(8, "little"), "big")
        return _fmix64((n * _LH_P1 + s64 + swapped + hi + ((r & M64) ^ (r >> 64))) & M64)
    acc = n * _LH_P1 + s64
    words = struct.unpack_from(f"<{(n // 16) * 2}Q", data)
    for i in range(n // 16):
        j, tw = 2 * (i & 7), ((i >> 3) * step) & M64
        acc += _mix(words[2 * i], words[2 * i + 1], (t[j] + tw) & M64, (t[j + 1] - tw) & M64)
    if n & 15:
        a, b = struct.unpack_from("<QQ", data, n - 16)
        acc += _mix(a, b, t[16], t[17])
    return _fmix64(acc & M64)


def _hash64(data: bytes, seed: int) -> int:
    """``_hash64k`` under the key of ``seed``."""
    return _hash64k(data, _hash_key(seed))


def _fingerprint(hash64: int) -> int:
    """The 32-bit fingerprint of a key hash (``hk_fingerprint`` in C)."""
    return (hash64 ^ (hash64 >> 32)) & M32


def sketch_hash(key: Any, seed: int = 0) -> int:
    """The 32-bit fingerprint the sketches know ``key`` by (``sketch_hash`` in the C core):
    the fold of the 64-bit key hash, whose halves also pick the key's rows."""
    kb = _key_bytes(key)
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    if not 0 <= seed <= M64:
        raise SketchError("seed must be in [0, 2**64 - 1]")
    return _fingerprint(_hash64(kb, seed))


def _row_indexes(hash64: int, width: int, depth: int) -> list[int]:
    """Double hashing from the halves; rows 2+ mix x first (``row_indexes`` in C says why)."""
    h1 = hash64 & M32
    h2 = (hash64 >> 32) | 1
    out = []
    for i in range(depth):
        x = (h1 + i * h2) & M32
        if i >= 2:
            x ^= x >> 16
            x = (x * 0x45D9F3B) & M32
            x ^= x >> 16
        out.append((x * width) >> 32)
    return out


def _build_tables() -> tuple[list[list[int]], int]:
    """Decay tables, built exactly as ``sk_tables_init`` in C.

    ``T[c] = floor(2^64 * b^-c)`` by iterated integer floor (starting from 2^64-1),
    and ``pow[c][j] ~ (1 - T[c]/2^64)^(2^j)`` in 0.64 fixed point by repeated
    squaring with floor: integers only, so C and Python agree bit for bit.
    """
    pows: list[list[int]] = [[]]
    t = M64
    c = 1
    while c < HK_MAX_LEVELS:
        t = (t // DECAY_DEN) * DECAY_NUM + ((t % DECAY_DEN) * DECAY_NUM) // DECAY_DEN
        if t == 0:
            break
        row = [(~t) & M64]
        for _ in range(1, HK_POW_BITS):
            row.append((row[-1] * row[-1]) >> 64)
        pows.append(row)
        c += 1
    return pows, c


_HK_POW, _HK_LEVELS = _build_tables()


def _hk_failures(c: int, n: int, u: int) -> int:
    """Failed decay trials before the first success at level ``c``, capped at ``n``."""
    pw = _HK_POW[c]
    t = 0
    acc = 0
    have = False
    for j in range(n.bit_length() - 1, -1, -1):
        cand = (acc * pw[j]) >> 64 if have else pw[j]
        if cand >= u:
            acc = cand
            have = True
            t += 1 << j
            if t >= n:
                return n
    return t


def _index_slots(k: int) -> int:
    want = max(2 * k, 8)
    p = 1
    while p < want:
        p <<= 1
    return p


def _nbytes(kind: int, k: int, width: int, depth: int, key_bytes: int) -> int:
    return (
        OVERHEAD
        + k * ENTRY_COST
        + _index_slots(k) * 4
        + key_bytes
        + width * depth * CELL_SIZE[kind]
    )


def _int_arg(value: Any, name: str, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, int):
        extra = " or None" if allow_none else ""
        raise TypeError(f"{name} must be an int{extra}, not {type(value).__name__}")
    return int(value)


def _plan(
    kind: int,
    k: int,
    memory: int | None,
    width: int | None,
    depth: int | None,
    seed: int,
    max_key_len: int,
    key_bytes: int | None,
) -> tuple[int, int, int, int, int, int]:
    """Resolve constructor arguments exactly as ``sk_plan`` does in C.

    Returns (k, width, depth, seed, max_key_len, key_bytes).
    """
    cs = CELL_SIZE[kind]
    if not 1 <= k <= MAX_K:
        raise SketchError(f"k must be in [1, {MAX_K}], got {k}")
    if not 0 <= seed <= M64:
        raise SketchError("seed must be in [0, 2**64 - 1]")  # a secret: never echoed
    if not 1 <= max_key_len <= MAX_KEY_LEN:
        raise SketchError(f"max_key_len must be in [1, {MAX_KEY_LEN}], got {max_key_len}")
    if depth is None:
        depth = DEFAULT_DEPTH[kind]
    if not 1 <= depth <= MAX_DEPTH:
        raise SketchError(f"depth must be in [1, {MAX_DEPTH}], got {depth}")
    if key_bytes is None:
        # The automatic split (docs/sketch.md, "Memory"), as sk_plan in C.
        if width is None or memory is not None:
            budget = DEFAULT_MEMORY if memory is None else memory
            key_bytes = min(budget // KEY_SHARE if budget > 0 else 0, k * max_key_len)
        else:
            key_bytes = k * min(max_key_len, KEY_RESERVE_AVG)
        key_bytes = min(max(key_bytes, max_key_len), MAX_KEY_BYTES)
    if not max_key_len <= key_bytes <= MAX_KEY_BYTES:
        raise SketchError(
            f"key_bytes must be in [max_key_len={max_key_len}, {MAX_KEY_BYTES}], got {key_bytes}"
        )
    fixed = _nbytes(kind, k, 0, 0, key_bytes)
    if width is None:
        need = fixed + depth * MIN_WIDTH * cs
        if memory is None:
            memory = DEFAULT_MEMORY
        if memory < need:
            raise SketchError(
                f"memory={memory} bytes is too small for k={k}: need at least {need} bytes "
                f"(top-k heap, index and {key_bytes} key bytes, plus {MIN_WIDTH} buckets per row)"
            )
        width = (memory - fixed) // (depth * cs)
        if width * depth > MAX_CELLS:
            width = MAX_CELLS // depth
    else:
        if width < 1 or width * depth > MAX_CELLS:
            raise SketchError(
                f"width must be in [1, {MAX_CELLS // depth}] for depth={depth}, got {width}"
            )
        if memory is not None and _nbytes(kind, k, width, depth, key_bytes) > memory:
            raise SketchError(
                f"memory={memory} bytes is too small for k={k}, width={width}, depth={depth}: "
                f"need {_nbytes(kind, k, width, depth, key_bytes)} bytes"
            )
    return k, width, depth, seed, max_key_len, key_bytes


def _hk_merge_slot(row: list[int], b: int, w: int) -> None:
    """``hk_merge_slot`` in C: merge slot word ``w`` into the bucket at ``row[b:b+2]``."""
    c = w & M32
    if not c:
        return
    for j in range(HK_SLOTS):
        if row[b + j] & M32 and row[b + j] >> 32 == w >> 32:
            if c > row[b + j] & M32:
                row[b + j] = w
            return
    for j in range(HK_SLOTS):
        if not row[b + j] & M32:
            row[b + j] = w
            return
    weak = 1 if (row[b + 1] & M32) < (row[b] & M32) else 0
    if c > row[b + weak] & M32:
        row[b + weak] = w


def _key_bytes(o: Any) -> bytes:
    # bytes and str follow the one key rule (hotkeyd.protocol.keys); like the C core, the sketch
    # also takes any contiguous buffer, and no numbers
    if isinstance(o, (bytes, str)):
        return key_bytes(o)
    try:
        mv = memoryview(o)
    except TypeError:
        raise TypeError(
            f"key must be bytes, str or a bytes-like object, not {type(o).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise TypeError(f"key must be a contiguous bytes-like object, not {type(o).__name__}")
    return mv.tobytes()


def _count(o: Any) -> int:
    try:
        v = operator.index(o)
    except TypeError:
        raise TypeError(f"count must be an int, not {type(o).__name__}") from None
    if not 0 <= v <= COUNT_MAX:
        raise SketchError(f"count must be in [0, {COUNT_MAX}], got {v}")
    return v


def _counts(o: Any, n: int) -> list[int]:
    if isinstance(o, str):
        raise TypeError("counts must be a sequence of ints, not str")
    if hasattr(o, "dtype") and hasattr(o, "ndim"):
        if o.dtype.kind not in "iu" or o.ndim != 1:
            raise TypeError(f"counts must hold integers, not dtype {o.dtype}")
        o = o.tolist()
    try:
        items = list(o)
    except TypeError:
        raise TypeError("counts must be a sequence of ints or an integer array") from None
    if len(items) != n:
        raise SketchError(f"counts has {len(items)} items but keys has {n} (lengths must match)")
    return [_count(c) for c in items]


class _Round:
    """A batch's pre-aggregation state (``sk_agg`` in C): the round's keys with summed
    counts in first-occurrence order, its event count, and the events left in direct mode."""

    __slots__ = ("agg", "direct", "events")

    def __init__(self) -> None:
        self.agg: dict[bytes, int] = {}
        self.events = 0
        self.direct = 0


class _Sketch:
    """Shared state and top-k heap; subclasses implement the counter table."""

    _KIND = 0

    def __init__(
        self,
        k: int = 100,
        memory: int | None = None,
        *,
        width: int | None = None,
        depth: int | None = None,
        seed: int = 0,
        max_key_len: int = 1024,
        key_bytes: int | None = None,
        adapt_keys: bool = False,
    ) -> None:
        if not isinstance(adapt_keys, bool):
            raise TypeError(f"adapt_keys must be a bool, not {type(adapt_keys).__name__}")
        k_ = _int_arg(k, "k", False)
        mem = _int_arg(memory, "memory", True)
        w = _int_arg(width, "width", True)
        d = _int_arg(depth, "depth", True)
        s = _int_arg(seed, "seed", False)
        ml = _int_arg(max_key_len, "max_key_len", False)
        kb = _int_arg(key_bytes, "key_bytes", True)
        assert k_ is not None and s is not None and ml is not None
        params = _plan(self._KIND, k_, mem, w, d, s, ml, kb)
        self._init(*params)
        # as sk_plan in C: only the automatic split adapts, and only when asked
        self._adaptive = adapt_keys and kb is None and (w is None or mem is not None)

    def _init(
        self, k: int, width: int, depth: int, seed: int, max_key_len: int, key_bytes: int
    ) -> None:
        self._k = k
        self._width = width
        self._depth = depth
        self._seed = seed
        self._hkey = _hash_key(seed)
        self._max_key_len = max_key_len
        self._key_bytes = key_bytes
        self._rng0 = seed ^ 0xD1B54A32D192ED03
        self._adaptive = False
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._cells = [0] * (self._width * self._depth * WORDS[self._KIND])
        self._rng = self._rng0
        self._heap: list[list[Any]] = []  # [count, hash, key]
        self._index: dict[bytes, int] = {}
        self._live = 0
        self._space_evictions = 0

    # -- properties -------------------------------------------------------------
    @property
    def k(self) -> int:
        """Capacity of the top-k heap."""
        return self._k

    @property
    def width(self) -> int:
        """Buckets per row."""
        return self._width

    @property
    def depth(self) -> int:
        """Number of rows."""
        return self._depth

    @property
    def seed(self) -> int:
        """Hash and decay RNG seed."""
        return self._seed

    @property
    def adapt_keys(self) -> bool:
        """Whether the key store may take bytes from the table for long keys."""
        return self._adaptive

    @property
    def max_key_len(self) -> int:
        """Longest accepted key in bytes."""
        return self._max_key_len

    @property
    def key_bytes(self) -> int:
        """Byte budget for keys held by the heap."""
        return self._key_bytes

    @property
    def space_evictions(self) -> int:
        """Entries dropped to make room for a longer key (key_bytes too small for k keys)."""
        with self._lock:  # sketch state: never a value from the middle of a batch
            return self._space_evictions

    @property
    def nbytes(self) -> int:
        """Bytes the native layout uses (never above the memory budget)."""
        return _nbytes(self._KIND, self._k, self._width, self._depth, self._key_bytes)

    def __len__(self) -> int:
        return len(self._heap)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(k={self._k}, width={self._width}, depth={self._depth}, "
            f"seed={self._seed}, max_key_len={self._max_key_len}, nbytes={self.nbytes})"
        )

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (type(self).from_bytes, (self.to_bytes(),))

    # -- heap ---------------------------------------------------------------------
    def _swap(self, a: int, b: int) -> None:
        heap = self._heap
        heap[a], heap[b] = heap[b], heap[a]
        self._index[heap[a][2]] = a
        self._index[heap[b][2]] = b

    def _sift_down(self, p: int) -> None:
        heap = self._heap
        size = len(heap)
        while True:
            left = 2 * p + 1
            if left >= size:
                return
            m = left
            r = left + 1
            if r < size and heap[r][0] < heap[left][0]:
                m = r
            if heap[m][0] < heap[p][0]:
                self._swap(p, m)
                p = m
            else:
                return

    def _sift_up(self, p: int) -> None:
        heap = self._heap
        while p > 0:
            parent = (p - 1) // 2
            if heap[p][0] < heap[parent][0]:
                self._swap(p, parent)
                p = parent
            else:
                return

    def _offer(self, key: bytes, h: int, v: int) -> None:
        """As ``topk_offer`` in C: a member's count becomes max(count, v)."""
        if v == 0:
            return
        heap = self._heap
        size = len(heap)
        if size == self._k and v <= heap[0][0]:
            return
        pos = self._index.get(key)
        if pos is not None:
            if v > heap[pos][0]:
                heap[pos][0] = v
                self._sift_down(pos)
            return
        klen = len(key)
        if size == self._k and self._live - len(heap[0][2]) + klen <= self._key_bytes:
            old = heap[0][2]
            del self._index[old]
            self._live += klen - len(old)
            heap[0] = [v, h, key]
            self._index[key] = 0
            self._sift_down(0)
            return
        # Drop the weakest entries (all lighter than v) until the key fits, as in C.
        if size == self._k:
            self._pop_min()
        while self._live + klen > self._key_bytes:
            if self._want_more_keys(klen) and self._grow_keys():
                continue
            if heap[0][0] >= v:
                return
            self._pop_min()
            if self._space_evictions != COUNT_MAX:
                self._space_evictions += 1
        size = len(heap)
        heap.append([v, h, key])
        self._index[key] = size
        self._live += klen
        self._sift_up(size)

    def _want_more_keys(self, klen: int) -> bool:
        """``want_more_keys`` in C: k keys of the average tracked length would not fit."""
        return self._adaptive and (self._live + klen) * self._k > self._key_bytes * (
            len(self._heap) + 1
        )

    def _grow_keys(self) -> bool:
        """``sk_grow_keys`` in C: halve the width, give the freed bytes to the key store."""
        w, d = self._width, self._depth
        w2 = w // 2
        cap = self._k * self._max_key_len
        if w2 < max(self._k, MIN_WIDTH) or self._key_bytes >= min(cap, MAX_KEY_BYTES):
            return False
        nk = min(self._key_bytes + (w - w2) * d * CELL_SIZE[self._KIND], cap, MAX_KEY_BYTES)
        hk = self._KIND == KIND_HEAVYKEEPER
        old = self._cells
        new: list[int] = []
        for r in range(d):
            row = [0] * (w2 * (HK_SLOTS if hk else 1))
            for j in range(w):
                xlo = ((j << 32) + w - 1) // w
                xhi = (((j + 1) << 32) + w - 1) // w - 1
                for m in range((xlo * w2) >> 32, ((xhi * w2) >> 32) + 1):
                    if hk:
                        base = (r * w + j) * HK_SLOTS
                        for t in range(HK_SLOTS):
                            _hk_merge_slot(row, m * HK_SLOTS, old[base + t])
                    elif old[r * w + j] > row[m]:
                        row[m] = old[r * w + j]
            new += row
        self._cells = new
        self._width = w2
        self._key_bytes = nk
        return True

    def _pop_min(self) -> None:
        heap = self._heap
        old = heap[0][2]
        del self._index[old]
        self._live -= len(old)
        last = heap.pop()
        if heap:
            heap[0] = last
            self._index[last[2]] = 0
            self._sift_down(0)

    def _rebuild(self) -> None:
        self._index = {e[2]: i for i, e in enumerate(self._heap)}
        for i in range(len(self._heap) // 2 - 1, -1, -1):
            self._sift_down(i)

    # -- counters (subclasses) ------------------------------------------------------
    def _update_cells(self, hash64: int, n: int) -> int:
        raise NotImplementedError

    def _cell_estimate(self, hash64: int) -> int:
        raise NotImplementedError

    def _update_one(self, key: bytes, n: int) -> None:
        if n == 0:
            return
        h = _hash64k(key, self._hkey)
        self._offer(key, _fingerprint(h), self._update_cells(h, n))

    def _add(self, r: _Round, key: bytes, n: int) -> None:
        """Pre-aggregate one event into the round ``r``, as ``sk_agg_add`` in C."""
        if n == 0:
            return
        if r.direct:
            self._update_one(key, n)
            r.direct -= 1
            return
        agg = r.agg
        c = agg.get(key)
        if c is not None:
            agg[key] = min(c + n, COUNT_MAX)
            r.events += 1
            return
        if len(agg) == AGG_CAP:
            self._flush(r)
            if r.direct:
                self._update_one(key, n)
                r.direct -= 1
                return
        agg[key] = n
        r.events += 1

    def _flush(self, r: _Round) -> None:
        """Apply a round in first-occurrence order, empty it and pick the next mode."""
        agg = r.agg
        for key, n in agg.items():
            self._update_one(key, n)
        if len(agg) == AGG_CAP and r.events * DIRECT_NUM <= AGG_CAP * DIRECT_DEN:
            r.direct = DIRECT_SPAN
        agg.clear()
        r.events = 0

    def _check_len(self, key: bytes, where: str = "") -> None:
        if len(key) > self._max_key_len:
            raise SketchError(
                f"key{where} is {len(key)} bytes, longer than max_key_len={self._max_key_len} "
                f"(allowed: 0..{self._max_key_len})"
            )

    # -- public API -------------------------------------------------------------------
    def update(self, key: bytes | str, count: int = 1) -> None:
        """Add ``count`` occurrences of ``key`` (O(1) expected, whatever the count)."""
        n = _count(count)
        kb = _key_bytes(key)
        self._check_len(kb)
        with self._lock:
            self._update_one(kb, n)

    def update_many(self, keys: Sequence[bytes | str], counts: Any = None) -> None:
        """Add many keys at once; all-or-nothing (validated before any update)."""
        if isinstance(keys, (bytes, str, bytearray, memoryview)):
            raise TypeError(f"keys must be a sequence of keys, not a single {type(keys).__name__}")
        try:
            items = list(keys)
        except TypeError:
            raise TypeError("keys must be a sequence (list or tuple) of bytes or str") from None
        cs = _counts(counts, len(items)) if counts is not None else None
        kbs = [_key_bytes(o) for o in items]
        for i, kb in enumerate(kbs):
            self._check_len(kb, f" at index {i}")
        agg = _Round()
        with self._lock:
            if cs is None:
                for kb in kbs:
                    self._add(agg, kb, 1)
            else:
                for kb, n in zip(kbs, cs, strict=True):
                    self._add(agg, kb, n)
            self._flush(agg)

    def update_lines(self, buf: Any, counted: bool = False) -> tuple[int, int, int]:
        """Add newline-separated keys; returns (events_added, oversized, malformed)."""
        if isinstance(buf, str):
            raise TypeError("buf must be a bytes-like object, not str")
        try:
            data = memoryview(buf).tobytes()
        except TypeError:
            raise TypeError(f"buf must be a bytes-like object, not {type(buf).__name__}") from None
        counted = bool(counted)
        events = oversized = malformed = 0
        maxlen = self._max_key_len
        agg = _Round()
        with self._lock:
            for line in data.split(b"\n"):
                if line.endswith(b"\r"):
                    line = line[:-1]
                if not line:
                    continue
                n = 1
                if counted:
                    parsed = parse_counted(line)
                    if parsed is None:
                        malformed += 1
                        continue
                    line, n = parsed
                if len(line) > maxlen:
                    oversized += 1
                    continue
                events += n
                self._add(agg, line, n)
            self._flush(agg)
        return events, oversized, malformed

    def topk(self, n: int | None = None) -> list[tuple[bytes, int]]:
        """The heavy hitters, count descending, ties by key ascending; at most ``k``."""
        want = _int_arg(n, "n", True)
        if want is not None and want < 0:
            raise SketchError(f"n must be >= 0 or None, got {want}")
        with self._lock:
            items = sorted(((e[2], e[0]) for e in self._heap), key=lambda t: (-t[1], t[0]))
        return items if want is None else items[:want]

    def estimate(self, key: bytes | str) -> int:
        """Estimated count of ``key`` (max of the heap count and the counters)."""
        kb = _key_bytes(key)
        self._check_len(kb)
        with self._lock:
            est = self._cell_estimate(_hash64k(kb, self._hkey))
            pos = self._index.get(kb)
            if pos is not None:
                c = self._heap[pos][0]
                if (c > est) if self._KIND == KIND_HEAVYKEEPER else (c < est):
                    est = c
        return est

    def decay(self, factor: float) -> None:
        """Multiply every counter by ``factor``: ``c = floor(c * floor(factor * 2^32) / 2^32)``."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise TypeError(f"factor must be a float, not {type(factor).__name__}")
        try:
            f = float(factor)
        except OverflowError:
            f = 2.0
        if not 0.0 < f <= 1.0:
            raise SketchError(f"decay factor must be in (0, 1], got {factor!r}")
        fp = int(f * 4294967296.0)
        if fp >= 1 << 32:
            return
        with self._lock:
            self._decay_cells(fp)
            kept = []
            for e in self._heap:
                c = (e[0] * fp) >> 32
                if c == 0:
                    self._live -= len(e[2])
                    continue
                e[0] = c
                kept.append(e)
            self._heap = kept
            self._rebuild()

    def _decay_cells(self, fp: int) -> None:
        self._cells = [(c * fp) >> 32 for c in self._cells]

    def clear(self) -> None:
        """Forget everything (the decay RNG restarts from the seed too)."""
        with self._lock:
            self._reset()

    # -- serialization -------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Versioned, CRC32-checked serialization, byte-identical to the native one."""
        with self._lock:
            parts = [
                _HEADER.pack(
                    MAGIC,
                    SERIAL_VERSION,
                    self._KIND,
                    int(self._adaptive),
                    self._k,
                    self._width,
                    self._depth,
                    self._seed & M32,
                    self._max_key_len,
                    self._key_bytes,
                    DECAY_NUM,
                    DECAY_DEN,
                    self._rng,
                    len(self._heap),
                    self._space_evictions,
                    self._seed >> 32,
                ),
                struct.pack(f"<{len(self._cells)}{'Q' if self._KIND == 1 else 'I'}", *self._cells),
            ]
            for count, _h, key in self._heap:
                parts.append(struct.pack("<II", count, len(key)))
                parts.append(key)
        body = b"".join(parts)
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def from_bytes(cls, b: Any) -> Any:
        """Rebuild a sketch from ``to_bytes()``; corrupt input raises SerializationError."""
        if isinstance(b, str):
            raise TypeError("from_bytes() needs a bytes-like object, not str")
        try:
            buf = memoryview(b).tobytes()
        except TypeError:
            raise TypeError(
                f"from_bytes() needs a bytes-like object, not {type(b).__name__}"
            ) from None
        n = len(buf)
        if n < HEADER_SIZE + 4:
            raise SerializationError(
                f"truncated sketch: {n} bytes, need at least {HEADER_SIZE + 4}"
            )
        if buf[:4] != MAGIC:
            raise SerializationError("bad magic: not a hotkeyd sketch")
        version = int.from_bytes(buf[4:6], "little")
        if version != SERIAL_VERSION:
            raise SerializationError(
                f"unsupported sketch version {version} (supported: {SERIAL_VERSION})"
            )
        if int.from_bytes(buf[n - 4 :], "little") != zlib.crc32(buf[: n - 4]):
            raise SerializationError("checksum mismatch: sketch bytes are corrupt or truncated")
        (_m, _v, kind, res1, k, width, depth, seed, ml, kb, num, den, rng, size, spc, seed_hi) = (
            _HEADER.unpack_from(buf)
        )
        seed |= seed_hi << 32
        if kind != cls._KIND:
            raise SerializationError(
                f"sketch kind {kind} does not match the class (expected {cls._KIND})"
            )
        if res1 > 1 or num != DECAY_NUM or den != DECAY_DEN:
            raise SerializationError("corrupt header: reserved or decay fields invalid")
        try:
            params = _plan(cls._KIND, k, None, width, depth, seed, ml, kb)
        except SketchError as exc:
            raise SerializationError(str(exc)) from None
        cells = width * depth * WORDS[cls._KIND]
        table = width * depth * CELL_SIZE[cls._KIND]
        if size > k or table > n - 4 - HEADER_SIZE:
            raise SerializationError("corrupt sketch: heap size or table does not fit")
        self = cls.__new__(cls)
        self._init(*params)
        self._adaptive = bool(res1)
        self._rng = rng
        self._space_evictions = spc
        code = "Q" if cls._KIND == KIND_HEAVYKEEPER else "I"
        self._cells = list(struct.unpack_from(f"<{cells}{code}", buf, HEADER_SIZE))
        pos = HEADER_SIZE + table
        end = n - 4
        corrupt = SerializationError("corrupt sketch: invalid top-k entries")
        for i in range(size):
            if end - pos < 8:
                raise corrupt
            count, klen = struct.unpack_from("<II", buf, pos)
            pos += 8
            if klen > ml or klen > end - pos or count == 0 or self._live + klen > kb:
                raise corrupt
            key = buf[pos : pos + klen]
            if key in self._index:
                raise corrupt
            if i > 0 and count < self._heap[(i - 1) // 2][0]:
                raise corrupt
            self._heap.append([count, _fingerprint(_hash64k(key, self._hkey)), key])
            self._index[key] = i
            self._live += klen
            pos += klen
        if pos != end:
            raise corrupt
        return self


class HeavyKeeper(_Sketch):
    """HeavyKeeper (Gong et al., USENIX ATC 2018) with a top-k heap; pure-Python twin.

    Thread safety: each instance has its own lock taken around every operation.
    """

    _KIND = KIND_HEAVYKEEPER

    def _update_cells(self, hash64: int, n: int) -> int:
        # As hk_update_cells in C: own slot, else an empty slot, else decay the weaker slot.
        cells = self._cells
        width = self._width
        maxv = 0
        h = _fingerprint(hash64)
        for i, idx in enumerate(_row_indexes(hash64, width, self._depth)):
            j = (i * width + idx) * HK_SLOTS
            c0 = cells[j] & M32
            c1 = cells[j + 1] & M32
            if c0 and cells[j] >> 32 == h:
                pass
            elif c1 and cells[j + 1] >> 32 == h:
                j += 1
            elif c0 == 0 or c1 == 0:
                if c0 != 0:
                    j += 1
                cells[j] = (h << 32) | n
                if n > maxv:
                    maxv = n
                continue
            else:
                if c1 < c0:
                    j += 1
                cell = cells[j]
                c = cell & M32
                fp = cell >> 32
                rem = n
                while c < _HK_LEVELS:
                    # splitmix64, as rng_next() in C
                    self._rng = (self._rng + 0x9E3779B97F4A7C15) & M64
                    z = self._rng
                    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
                    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
                    u = z ^ (z >> 31)
                    # rem == 1 is one Bernoulli trial: decay iff u > pow[c][0].
                    g = (0 if u > _HK_POW[c][0] else 1) if rem == 1 else _hk_failures(c, rem, u)
                    if g >= rem:
                        break
                    rem -= g
                    c -= 1
                    if c == 0:
                        fp = h
                        c = rem
                        if c > maxv:
                            maxv = c
                        break
                    rem -= 1
                    if rem == 0:
                        break
                cells[j] = (fp << 32) | c
                continue
            c = min((cells[j] & M32) + n, COUNT_MAX)
            cells[j] = (h << 32) | c
            if c > maxv:
                maxv = c
        return maxv

    def _cell_estimate(self, hash64: int) -> int:
        est = 0
        width = self._width
        cells = self._cells
        h = _fingerprint(hash64)
        for i, idx in enumerate(_row_indexes(hash64, width, self._depth)):
            j = (i * width + idx) * HK_SLOTS
            for cell in cells[j : j + HK_SLOTS]:
                c = cell & M32
                if c and cell >> 32 == h and c > est:
                    est = c
        return est

    def _decay_cells(self, fp: int) -> None:
        out = []
        for cell in self._cells:
            c = ((cell & M32) * fp) >> 32
            out.append(((cell >> 32) << 32) | c if c else 0)
        self._cells = out


class CountMinTopK(_Sketch):
    """Count-Min sketch with conservative update and a top-k heap; pure-Python twin.

    Thread safety: each instance has its own lock taken around every operation.
    """

    _KIND = KIND_COUNTMIN

    def _update_cells(self, hash64: int, n: int) -> int:
        cells = self._cells
        width = self._width
        js = [i * width + idx for i, idx in enumerate(_row_indexes(hash64, width, self._depth))]
        v = min(min(cells[j] for j in js) + n, COUNT_MAX)
        for j in js:
            if cells[j] < v:
                cells[j] = v
        return v

    def _cell_estimate(self, hash64: int) -> int:
        width = self._width
        return min(
            self._cells[i * width + idx]
            for i, idx in enumerate(_row_indexes(hash64, width, self._depth))
        )

    def merge(self, other: CountMinTopK) -> None:
        """Add ``other`` into this sketch (same width, depth, seed and max_key_len)."""
        if not isinstance(other, CountMinTopK):
            raise TypeError(f"merge() needs a pure-Python CountMinTopK, not {type(other).__name__}")
        if other is self:
            other = CountMinTopK.from_bytes(self.to_bytes())
        first, second = sorted((self, other), key=id)
        with first._lock, second._lock:
            self._merge_locked(other)

    def _merge_locked(self, other: CountMinTopK) -> None:
        mine = (self._width, self._depth, self._max_key_len)
        theirs = (other._width, other._depth, other._max_key_len)
        if mine != theirs or self._seed != other._seed:
            seeds = "equal" if self._seed == other._seed else "differ"
            raise SketchError(  # the seeds are secrets: never in a message
                "cannot merge sketches of different shape: width/depth/max_key_len "
                f"{'/'.join(map(str, mine))} vs {'/'.join(map(str, theirs))}, seeds {seeds} "
                "(all must be equal)"
            )
        cands = [e[2] for e in self._heap]
        cands += [e[2] for e in other._heap if e[2] not in self._index]
        self._cells = [
            min(a + b, COUNT_MAX) for a, b in zip(self._cells, other._cells, strict=True)
        ]
        self._heap = []
        self._index = {}
        self._live = 0  # space_evictions is kept: rebuilding adds to it, never forgets
        for key in cands:
            h = _hash64k(key, self._hkey)
            self._offer(key, _fingerprint(h), self._cell_estimate(h))


def window_sums(sketches: Any, caches: Any, factors: Any, keys: Any) -> list[float]:
    """Twin of the C ``window_sums``: each key's count summed over ``sketches``, times factors.

    A key's count in sketch ``i`` is ``caches[i][key]`` when cached, else its estimate
    (stored into ``caches[i]``). Adds in sketch order, as the C core does.
    """
    sketches, caches, keys = list(sketches), list(caches), list(keys)
    if len(caches) != len(sketches) or len(factors) != len(sketches):
        raise ValueError("sketches, caches and factors differ in length")
    acc = [0.0] * len(keys)
    for sk, cache, f in zip(sketches, caches, factors, strict=True):
        f = float(f)
        estimate = sk.estimate
        for j, key in enumerate(keys):
            c = cache.get(key)
            if c is None:
                c = cache[key] = estimate(key)
            acc[j] += c if f == 1.0 else c * f
    return acc

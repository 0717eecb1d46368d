"""The client's view of which keys are hot, built from daemon notifications.

Several daemon instances may publish on one channel; each numbers its messages with
``seq`` (+1 per message). The hot set keeps, per instance, the last applied ``seq`` and
the keys that instance announced, and merges them into one mapping ``key -> HotItem``
that readers consult lock-free (a dict lookup is atomic under the GIL). Writers
(the subscriber thread or task) go through :meth:`HotSet.apply` under a lock.

A key is identified by its bytes and its Redis db (the same name in two dbs is two
keys): the live mapping is keyed by :func:`ident`, the key bytes for db 0 (so the
common lookup stays one dict probe on bytes) and ``(key, db)`` for other dbs.

A key is hot while at least one instance announced it and its ``ttl_ms`` has not run
out since the last announcement: the daemon re-announces hot keys before their TTL,
so a lost ``cool`` message or a dead daemon can only keep a key hot for one TTL.

Everything on the channel is untrusted input (anyone allowed to PUBLISH there can write
it), so the set bounds what a message can do: a TTL above ``max_ttl`` is cut to it, one
instance holds at most ``max_keys_per_instance`` keys, the set at most ``max_keys``, at
most ``max_instances`` instances are tracked (new ones are refused beyond that, not
traded for a quadratic scan), and a ``seq`` more than ``max_seq_jump`` ahead of what
was applied is a gap even in a ``full`` message, so the caller checks it against the
snapshot before adopting it.

This module does no I/O: whoever feeds it decides how to resync (see
:class:`~hotkeyd.client.subscriber.Subscriber`), which keeps the sequence logic
testable with a :class:`~hotkeyd.clock.ManualClock`.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hotkeyd.clock import Clock, SystemClock
from hotkeyd.protocol import limits
from hotkeyd.protocol.wire import HotEntry, Message

__all__ = ["ApplyResult", "HotItem", "HotSet", "Ident", "hot_lookup", "ident"]

logger = logging.getLogger(__name__)

OnHot = Callable[[HotEntry], object]
OnCool = Callable[[bytes], object]
Ident = bytes | tuple[bytes, int]


def ident(key: bytes, db: int = 0) -> Ident:
    """The hot set's identity of ``key`` in ``db``: the bytes for db 0, else ``(key, db)``."""
    return key if db == 0 else (key, db)


def hot_lookup(items: Mapping[Ident, HotItem], db: int) -> Callable[[bytes], HotItem | None]:
    """``key -> HotItem | None`` over :attr:`HotSet.items` for a client of ``db`` (lock-free)."""
    if db == 0:
        return items.get
    return lambda key: items.get((key, db))


def _key_of(i: Ident) -> bytes:
    return i if isinstance(i, bytes) else i[0]


class ApplyResult(enum.Enum):
    """What :meth:`HotSet.apply` did with a message."""

    APPLIED = "applied"
    STALE = "stale"  # seq already seen (duplicate, or covered by a newer snapshot)
    GAP = "gap"  # seq jumped (or unknown instance): caller should resync, then force
    REFUSED = "refused"  # a new instance while ``max_instances`` are tracked


@dataclass(slots=True)
class HotItem:
    """One hot key as readers see it.

    Attributes:
        entry: the latest announcement (rule, ``ttl_ms``, rate ...).
        expires: monotonic time after which the key is no longer hot.
        instance: the daemon instance that most recently announced it (where demand
            reports for it go).
        served: reads of it served locally so far (a plain int the caches bump on the
            read path; :mod:`hotkeyd.client.demand` reports the increase).
    """

    entry: HotEntry
    expires: float
    instance: str = ""
    served: int = 0


@dataclass(slots=True)
class _Instance:
    seq: int | None = None
    ts: float = 0.0
    final: bool = False
    seen: float = 0.0  # monotonic time of its last message
    keys: dict[Ident, float] = field(default_factory=dict)  # ident -> monotonic expiry
    since: dict[Ident, int] = field(default_factory=dict)  # ident -> seq that made it hot


class HotSet:
    """Thread-safe set of hot keys merged over daemon instances.

    Args:
        clock: time source; ``monotonic()`` drives TTL expiry.
        max_keys: memory bound; announcements of new keys beyond it are dropped
            (counted in :attr:`dropped`), whatever the daemon sends.
        max_instances: bound on remembered daemon instances. Instances holding no
            keys are forgotten after ``forget_idle`` seconds without a message, or
            oldest first beyond this bound (counted in :attr:`forgotten`); a forgotten
            instance's next message is a sequence gap, which resyncs from the snapshot.
        forget_idle: seconds after which a silent instance with no hot keys is forgotten.
        max_ttl: longest time (s) one announcement keeps a key hot, whatever ``ttl_ms``
            says (longer ones are cut and counted in :attr:`clamped`).
        max_keys_per_instance: keys one instance may hold (more are dropped and counted).
        max_seq_jump: a ``seq`` further ahead than this is a gap even in a ``full``
            message (so it is checked against the snapshot, not adopted).
        on_hot: called with the entry when a key turns hot (not on re-announcements).
        on_cool: called with the key bytes when it stops being hot in some db (cool,
            full replace, TTL).

    Callbacks run on the feeding thread, after the lock is released; an exception in a
    callback is logged (rate-limited) and swallowed so one bad callback cannot stop
    notifications.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        max_keys: int = limits.HOTSET_KEYS_MAX,
        max_instances: int = limits.HOTSET_INSTANCES_MAX,
        forget_idle: float = float(limits.HOTSET_FORGET_IDLE_S),
        max_ttl: float = limits.HOTSET_TTL_MS_MAX / 1000,
        max_keys_per_instance: int = limits.HOTSET_KEYS_PER_INSTANCE_MAX,
        max_seq_jump: int = limits.SEQ_JUMP_MAX,
        on_hot: OnHot | None = None,
        on_cool: OnCool | None = None,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        if max_instances < 1:
            raise ValueError(f"max_instances must be >= 1, got {max_instances}")
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_keys = max_keys
        self.max_instances = max_instances
        self.forget_idle = forget_idle
        self.max_ttl_ms = max(1, int(max_ttl * 1000))
        self.max_keys_per_instance = max_keys_per_instance
        self.max_seq_jump = max_seq_jump
        self.forgotten = 0
        self.clamped = 0
        self.refused = 0
        self._scanned_at = -1e9
        self._lock = threading.Lock()
        self._items: dict[Ident, HotItem] = {}  # mutated in place only: readers keep a reference
        self._instances: dict[str, _Instance] = {}
        self._on_hot: list[OnHot] = [on_hot] if on_hot else []
        self._on_cool: list[OnCool] = [on_cool] if on_cool else []
        self.dropped = 0
        self.callback_errors = 0
        # The cache whose demand reporter reports this set's ``served`` counters (one
        # per set, so caches sharing a subscriber never report the same reads twice).
        self.demand_owner: object | None = None
        self._last_cb_log = 0.0

    # ----------------------------------------------------------------- readers
    @property
    def items(self) -> Mapping[Ident, HotItem]:
        """Live read-only view ``ident(key, db) -> HotItem`` for lock-free membership checks.

        Entries past ``expires`` may linger until the next :meth:`expire`; check
        ``item.expires`` (or use :meth:`get`) when that matters.
        """
        return self._items

    def get(self, key: bytes, db: int = 0) -> HotEntry | None:
        """Return the entry of ``key`` in ``db`` if it is hot now, else None."""
        item = self._items.get(key if db == 0 else (key, db))
        if item is None or item.expires <= self.clock.monotonic():
            return None
        return item.entry

    def __contains__(self, key: object) -> bool:
        """``key in hot_set``: the bytes of a db-0 key, or ``(key, db)``."""
        if isinstance(key, bytes):
            return self.get(key) is not None
        if isinstance(key, tuple) and len(key) == 2:
            k, db = key
            return isinstance(k, bytes) and isinstance(db, int) and self.get(k, db) is not None
        return False

    def __len__(self) -> int:
        return len(self._items)

    def keys(self, db: int = 0) -> list[bytes]:
        """Keys of ``db`` hot now (a copy)."""
        now = self.clock.monotonic()
        return [
            it.entry.key
            for it in list(self._items.values())
            if it.expires > now and it.entry.db == db
        ]

    def last_seq(self, instance: str) -> int | None:
        """Last applied sequence number of ``instance`` (None if unknown)."""
        with self._lock:
            st = self._instances.get(instance)
            return None if st is None else st.seq

    def hot_since(self, key: bytes, db: int = 0) -> list[tuple[str, int]]:
        """(instance, seq of the announcement that made the key hot there), per instance
        holding it now: what a strict read's guard checks the watch's ``armed`` against."""
        i = ident(key, db)
        now = self.clock.monotonic()
        with self._lock:
            return sorted(
                (name, st.since[i])
                for name, st in self._instances.items()
                if st.keys.get(i, 0.0) > now and i in st.since
            )

    def instances(self) -> list[str]:
        """Instances the set has heard of."""
        with self._lock:
            return list(self._instances)

    # -------------------------------------------------------------- listeners
    def add_listener(self, on_hot: OnHot | None = None, on_cool: OnCool | None = None) -> None:
        """Register more callbacks (e.g. a cache dropping entries of cooled keys)."""
        with self._lock:
            if on_hot is not None:
                self._on_hot.append(on_hot)
            if on_cool is not None:
                self._on_cool.append(on_cool)

    # ----------------------------------------------------------------- writers
    def apply(self, msg: Message, *, force: bool = False) -> ApplyResult:
        """Apply one message (or snapshot, which is a ``full`` message).

        Args:
            msg: the notification.
            force: apply even across a gap (after a resync could not close it);
                missed announcements then heal within one TTL.

        Returns:
            ``GAP`` when the caller should resync ``msg.instance`` from its snapshot
            and call again with ``force=True``; nothing was changed in that case.
        """
        now = self.clock.monotonic()
        turned_hot: list[HotEntry] = []
        cooled: list[Ident] = []
        with self._lock:
            st = self._instances.get(msg.instance)
            if st is None and not self._room_for_instance(now):
                self.refused += 1
                return ApplyResult.REFUSED
            if msg.full:
                if st is not None and st.seq is not None and not _newer_full(st, msg):
                    return ApplyResult.STALE
                if (
                    st is not None
                    and st.seq is not None
                    and msg.seq > st.seq + self.max_seq_jump
                    and not force
                ):
                    return ApplyResult.GAP
                if st is None:
                    st = self._instances[msg.instance] = _Instance()
                old = st.keys
                st.keys = {}
                self._announce(st, msg, now, turned_hot)
                for key in old:
                    if key not in st.keys:
                        st.since.pop(key, None)
                        self._withdraw(key, now, cooled)
            else:
                if st is not None and st.seq is not None and msg.seq <= st.seq:
                    return ApplyResult.STALE
                gap = st is None or st.seq is None or msg.seq != st.seq + 1
                if gap and not force:
                    return ApplyResult.GAP
                if st is None:
                    st = self._instances[msg.instance] = _Instance()
                self._announce(st, msg, now, turned_hot)
                for c in msg.cool:
                    i = ident(c.key, c.db)
                    st.since.pop(i, None)
                    if st.keys.pop(i, None) is not None:
                        self._withdraw(i, now, cooled)
            st.seq, st.ts, st.final, st.seen = msg.seq, msg.ts, msg.final, now
        self._notify(turned_hot, cooled)
        return ApplyResult.APPLIED

    def expire(self) -> int:
        """Remove keys whose TTL passed; returns how many cooled. Call periodically."""
        now = self.clock.monotonic()
        cooled: list[Ident] = []
        with self._lock:
            for st in self._instances.values():
                dead = [k for k, exp in st.keys.items() if exp <= now]
                for k in dead:
                    del st.keys[k]
                    st.since.pop(k, None)
            for key, item in list(self._items.items()):
                if item.expires <= now:
                    self._withdraw(key, now, cooled)
            self._forget_instances(now)
        self._notify([], cooled)
        return len(cooled)

    def _room_for_instance(self, now: float) -> bool:
        """Whether a new instance may be tracked (lock held).

        At the cap, idle keyless instances are forgotten -- but that scan runs at most
        once a second, so a flood of forged instance ids costs linear time, not quadratic.
        """
        if len(self._instances) < self.max_instances:
            return True
        if now - self._scanned_at >= 1.0:
            self._scanned_at = now
            self._forget_instances(now, over_cap=True)
        return len(self._instances) < self.max_instances

    def _forget_instances(self, now: float, *, over_cap: bool = False) -> None:
        """Drop instances that hold no keys and said goodbye or went quiet (bounded state).

        Crashed daemons never send ``final`` and restarted pods come back under new ids,
        so without this the per-instance state (and the cost of :meth:`expire`) would
        grow forever. Called with the lock held.
        """
        idle = [
            (st.seen, name)
            for name, st in self._instances.items()
            if not st.keys and (st.final or now - st.seen >= self.forget_idle or over_cap)
        ]
        if over_cap:
            idle.sort()
            idle = idle[: max(1, len(self._instances) - self.max_instances + 1)]
        for _, name in idle:
            del self._instances[name]
        self.forgotten += len(idle)

    def clear(self) -> None:
        """Forget everything (on_cool fires for every key)."""
        with self._lock:
            cooled = list(self._items)
            self._items.clear()
            self._instances.clear()
        self._notify([], cooled)

    # ---------------------------------------------------------------- internal
    def _announce(
        self, st: _Instance, msg: Message, now: float, turned_hot: list[HotEntry]
    ) -> None:
        for h in msg.hot:
            if h.ttl_ms > self.max_ttl_ms:
                h = dataclasses.replace(h, ttl_ms=self.max_ttl_ms)
                self.clamped += 1
            i = ident(h.key, h.db)
            if i not in st.keys and len(st.keys) >= self.max_keys_per_instance:
                self.dropped += 1
                continue
            exp = now + max(h.ttl_ms, 0) / 1000.0
            item = self._items.get(i)
            if item is None:
                if len(self._items) >= self.max_keys:
                    self.dropped += 1
                    continue
                self._items[i] = HotItem(h, exp, msg.instance)
                turned_hot.append(h)
            else:
                item.entry = h
                item.instance = msg.instance
                item.expires = max(item.expires, exp) if item.expires > now else exp
            st.keys[i] = exp
            if i not in st.since:
                st.since[i] = msg.seq

    def _withdraw(self, key: Ident, now: float, cooled: list[Ident]) -> None:
        """``key`` lost one instance's claim: keep it while another still holds it."""
        best = 0.0
        holder = ""
        for name, st in self._instances.items():
            exp = st.keys.get(key)
            if exp is not None and exp > best:
                best, holder = exp, name
        item = self._items.get(key)
        if item is None:
            return
        if best > now:
            item.expires = best
            item.instance = holder
        else:
            del self._items[key]
            cooled.append(key)

    def _notify(self, turned_hot: list[HotEntry], cooled: list[Ident]) -> None:
        if not turned_hot and not cooled:
            return
        on_hot, on_cool = list(self._on_hot), list(self._on_cool)
        for entry in turned_hot:
            for cb in on_hot:
                self._call(cb, entry)
        for i in cooled:
            for cb2 in on_cool:
                self._call(cb2, _key_of(i))

    def _call(self, cb: Callable[[Any], object], arg: object) -> None:
        try:
            cb(arg)
        except Exception:
            self.callback_errors += 1
            now = time.monotonic()
            if now - self._last_cb_log > 10.0:
                self._last_cb_log = now
                logger.exception(
                    "hot-set callback %r failed (%d failures so far)", cb, self.callback_errors
                )


def _newer_full(st: _Instance, msg: Message) -> bool:
    """Whether a full message/snapshot supersedes what we applied from that instance.

    A higher ``seq`` is newer. A lower ``seq`` with a later timestamp is a restarted
    daemon that kept its instance id (its counter started again).
    """
    assert st.seq is not None
    return msg.seq > st.seq or (msg.seq < st.seq and msg.ts > st.ts)

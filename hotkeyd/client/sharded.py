"""ShardedCounter: split a write-hot counter (stock, likes, quota) over N keys.

Reads of a hot key can be cached; writes cannot. Spreading increments of one logical
counter over ``shards`` keys, chosen by a stable hash (mmh3, never Python's ``hash()``,
which differs per process) of a caller id, spreads the per-key contention (and, with
``hash_tag=False`` on Redis Cluster, the load over nodes). A read sums all shards.

"Take if stock remains" (:meth:`ShardedCounter.take`) never oversells and never says
"sold out" while enough stock remains, in both layouts:

* ``hash_tag=True`` (default): the shard keys share the hash tag ``{key}``
  (``{stock:42}:0`` ... ``{stock:42}:7``), so they live in one cluster slot and one Lua
  script (``spec/lua/sharded_take_all.lua``) checks the total and takes from the
  caller's shard, then the next ones: atomic, one round trip.
* ``hash_tag=False``: the shards spread over slots (and nodes), where no script can see
  them all. :meth:`take` then *reserves* units shard by shard (each step one script on
  one shard, ``sharded_reserve.lua``: free units move into a hold under the caller's
  token, with a lease), and when it holds ``amount`` it *commits* the holds
  (``sharded_settle.lua``); when the shards cannot supply ``amount`` it *releases* them.
  It answers "sold out" only when the free units plus the units other callers hold in
  flight are below ``amount``; otherwise it retries with backoff, so a caller never
  loses to units that another caller is about to give back. A caller that dies mid-take
  leaves holds whose lease (``lease`` s) expires: the next reserve on that shard returns
  them. Every failure either leaves the stock as it was (after releasing, or at the
  latest when the leases expire) or raises :class:`PartialTakeError` saying exactly how
  many units were taken.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import mmh3
from redis.crc import key_slot

from hotkeyd.backoff import Backoff
from hotkeyd.conn.cluster import AnyRedis
from hotkeyd.conn.redis import REDIS_ERRORS
from hotkeyd.errors import ClientError
from hotkeyd.protocol.contract import lua
from hotkeyd.protocol.keys import key_bytes

__all__ = ["PartialTakeError", "ShardedCounter"]

_SEED = 0x5EED  # fixed: every process must route an id to the same shard

# The scripts are shared with every client language: spec/lua/sharded_*.lua.


class PartialTakeError(ClientError):
    """A spread-mode :meth:`ShardedCounter.take` failed after committing some units.

    Attributes:
        taken: units really taken (gone from the stock); the rest were not.
        wanted: the amount asked for.
    """

    def __init__(self, message: str, *, taken: int, wanted: int) -> None:
        super().__init__(message)
        self.taken = taken
        self.wanted = wanted


def holds_key(shard_key: str) -> str:
    """The hash of in-flight holds beside ``shard_key``, in the same cluster slot."""
    for candidate in (f"{{{shard_key}}}:held", f"{shard_key}:held"):
        if key_slot(candidate.encode()) == key_slot(shard_key.encode()):
            return candidate
    raise ValueError(f"cannot place a holds key in the slot of {shard_key!r}")


class ShardedCounter:
    """An integer counter kept as ``shards`` Redis keys.

    Args:
        client: ``redis.Redis`` or ``redis.cluster.RedisCluster``.
        key: the logical counter name.
        shards: number of shard keys (1..1024).
        hash_tag: put ``{key}`` in every shard key so they share a cluster slot (one
            atomic script per take); False spreads them over slots and nodes.
        lease: spread mode: seconds a reservation survives a caller that died mid-take.
        wait: spread mode: longest a take retries while other callers hold the units
            it needs (their takes normally settle within milliseconds; a dead caller's
            hold settles when its lease runs out). Past it, :meth:`take` raises
            :class:`~hotkeyd.errors.ClientError` rather than guess "sold out".
    """

    def __init__(
        self,
        client: AnyRedis,
        key: str,
        *,
        shards: int = 8,
        hash_tag: bool = True,
        lease: float = 5.0,
        wait: float | None = None,
    ) -> None:
        if not 1 <= shards <= 1024:
            raise ValueError(f"shards must be in 1..1024, got {shards}")
        if lease <= 0:
            raise ValueError(f"lease must be > 0 seconds, got {lease}")
        self.client = client
        self.key = key
        self.shards = shards
        self.hash_tag = hash_tag
        self.lease = lease
        self.wait = 2 * lease + 1.0 if wait is None else wait
        self.keys = [f"{{{key}}}:{i}" if hash_tag else f"{key}:shard:{i}" for i in range(shards)]
        self.holds = [holds_key(k) for k in self.keys] if not hash_tag else []
        scripting: Any = client  # Any: the redis stubs lack RedisCluster.register_script
        self._take_all = scripting.register_script(lua("sharded_take_all.lua"))
        self._reserve = scripting.register_script(lua("sharded_reserve.lua"))
        self._settle = scripting.register_script(lua("sharded_settle.lua"))

    def shard_of(self, caller_id: Any) -> int:
        """Shard index of ``caller_id`` (stable across processes and hosts)."""
        return int(mmh3.hash(key_bytes(caller_id), _SEED, signed=False)) % self.shards

    def incr(self, caller_id: Any, amount: int = 1) -> int:
        """Add ``amount`` to the caller's shard; returns that shard's new value."""
        return int(self.client.incrby(self.keys[self.shard_of(caller_id)], amount))

    def decr(self, caller_id: Any, amount: int = 1) -> int:
        """Subtract ``amount`` from the caller's shard (may go negative; see :meth:`take`)."""
        return int(self.client.decrby(self.keys[self.shard_of(caller_id)], amount))

    def value(self) -> int:
        """The total over all shards, units held by takes in flight included.

        One MGET with the hash tag; per-shard reads in one pipeline otherwise (a
        cluster pipeline sends each node its part).
        """
        if self.hash_tag:
            return sum(int(v) for v in self.client.mget(self.keys) if v is not None)
        pipe = self.client.pipeline(transaction=False)
        for k, h in zip(self.keys, self.holds, strict=True):
            pipe.get(k)
            pipe.hvals(h)
        out = pipe.execute()
        total = 0
        for free, held in zip(out[::2], out[1::2], strict=True):
            total += int(free or 0) + sum(_units(v) for v in held)
        return total

    def set_total(self, total: int) -> None:
        """Spread ``total`` evenly over the shards (e.g. to load stock).

        One MSET with the hash tag; otherwise one pipeline of SETs that also drops
        holds in flight (their takes then commit nothing and raise, or release nothing).
        """
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        base, extra = divmod(total, self.shards)
        values: dict[Any, Any] = {
            k: base + (1 if i < extra else 0) for i, k in enumerate(self.keys)
        }
        if self.hash_tag:
            self.client.mset(values)
            return
        pipe = self.client.pipeline(transaction=False)
        for (k, v), h in zip(values.items(), self.holds, strict=True):
            pipe.set(k, v)
            pipe.delete(h)
        pipe.execute()

    def take(self, caller_id: Any, amount: int = 1) -> int | None:
        """Take ``amount`` units if that much remains in total (gathered over shards).

        Returns the total left afterwards, or None (nothing taken) when the stock is
        short. The caller's shard is tried first so concurrent callers mostly touch
        different keys.

        Raises:
            PartialTakeError: spread mode only, a failure after some units were
                committed (``taken`` says how many); never raised with the hash tag.
            ClientError: spread mode, other callers held the units past ``wait``.
            redis.RedisError: Redis failed; nothing was taken (spread mode: units
                reserved before the failure were released, or come back when their
                lease runs out).
        """
        if amount < 1:
            raise ValueError(f"amount must be >= 1, got {amount}")
        first = self.shard_of(caller_id)
        if self.hash_tag:
            left = int(self._take_all(keys=self.keys, args=[first, amount]))
            return None if left < 0 else left
        return self._take_spread(first, amount)

    # ------------------------------------------------------------------ spread mode
    def _take_spread(self, first: int, amount: int) -> int | None:
        token = uuid.uuid4().hex
        lease_ms = max(1, int(self.lease * 1000))
        backoff = Backoff(0.001, 0.05)
        deadline = time.monotonic() + self.wait
        order = [(first + j) % self.shards for j in range(self.shards)]
        while True:
            held: dict[int, int] = {}
            free = others = 0
            try:
                for i in order:
                    got, left, busy = self._reserve(
                        keys=[self.keys[i], self.holds[i]],
                        args=[token, amount - sum(held.values()), lease_ms],
                    )
                    if int(got):
                        held[i] = held.get(i, 0) + int(got)
                    free += max(0, int(left))
                    others += int(busy)
                    if sum(held.values()) == amount:
                        break
            except BaseException:
                self._release_after_failure(token, held)
                raise
            if sum(held.values()) == amount:
                return self._commit(token, held, amount)
            self._release_after_failure(token, held, reraise=True)
            if sum(held.values()) + free + others < amount:
                return None  # even if every hold in flight came back, it is short
            if time.monotonic() >= deadline:
                raise ClientError(
                    f"take({amount}) on {self.key!r}: other callers held the units for "
                    f"longer than {self.wait:g}s; nothing was taken"
                )
            time.sleep(backoff.next_delay())

    def _settle_all(self, token: str, shards: list[int], how: str) -> dict[int, int]:
        done: dict[int, int] = {}
        for i in shards:
            done[i] = int(self._settle(keys=[self.keys[i], self.holds[i]], args=[token, how]))
        return done

    def _release_after_failure(
        self, token: str, held: dict[int, int], *, reraise: bool = False
    ) -> None:
        """Give reserved units back; a failure here leaves them to their lease."""
        if not held:
            return
        try:
            self._settle_all(token, list(held), "release")
        except REDIS_ERRORS:
            if reraise:
                raise
            # The original error propagates; the holds expire within the lease.

    def _commit(self, token: str, held: dict[int, int], amount: int) -> int:
        committed: dict[int, int] = {}
        try:
            for i in held:
                committed[i] = self._settle_all(token, [i], "commit")[i]
        except REDIS_ERRORS as exc:
            rest = [i for i in held if i not in committed]
            self._release_after_failure(token, {i: held[i] for i in rest})
            taken = sum(committed.values())
            self._give_back(committed, taken, amount, exc)
            raise  # pragma: no cover - _give_back always raises
        taken = sum(committed.values())
        if taken != amount:  # a hold outlived its lease: those units went back to stock
            self._give_back(committed, taken, amount, None)
        return self.value()

    def _give_back(
        self, committed: dict[int, int], taken: int, amount: int, cause: BaseException | None
    ) -> None:
        """Return committed units of a take that cannot complete, then raise."""
        why = f"{type(cause).__name__}: {cause}" if cause else "a reservation outlived its lease"
        try:
            pipe = self.client.pipeline(transaction=False)
            for i, units in committed.items():
                if units:
                    pipe.incrby(self.keys[i], units)
            pipe.execute()
        except REDIS_ERRORS:
            raise PartialTakeError(
                f"take({amount}) on {self.key!r} failed ({why}) after taking {taken} unit(s), "
                "which could not be given back",
                taken=taken,
                wanted=amount,
            ) from cause
        raise PartialTakeError(
            f"take({amount}) on {self.key!r} failed ({why}); nothing was taken",
            taken=0,
            wanted=amount,
        ) from cause

    def clear(self) -> None:
        """Delete every shard key (and, spread, the holds)."""
        pipe = self.client.pipeline(transaction=False)
        for name in [*self.keys, *self.holds]:
            pipe.delete(name)
        pipe.execute()


def _units(hold: bytes | str) -> int:
    text = hold.decode() if isinstance(hold, bytes) else hold
    return int(text.split(":", 1)[0] or 0)

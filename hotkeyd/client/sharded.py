"""ShardedCounter: split a write-hot counter (stock, likes, quota) over N keys.

Reads of a hot key can be cached; writes cannot. Spreading increments of one logical
counter over ``shards`` keys, chosen by a stable hash (mmh3, never Python's ``hash()``,
which differs per process) of a caller id, spreads the per-key contention (and, with
``hash_tag=False`` on Redis Cluster, the load over nodes). A read sums all shards.

"Take if stock remains" (:meth:`ShardedCounter.take`) is one Lua script over *all*
shard keys: it checks the total first and then takes from the caller's shard, then the
next ones, never driving any shard - and so never the total - below zero. A script may
only touch keys of one cluster slot, so by default the shard keys share the hash tag
``{key}`` (``{stock:42}:0`` ... ``{stock:42}:7``): every shard lives on one node, which
keeps the atomic take correct on Redis Cluster. With ``hash_tag=False`` the shards spread
over slots and :meth:`take` falls back to a per-shard script walk (still never oversells;
under contention it can report "sold out" a moment early while another caller holds the
last units of a shard it already passed).
"""

from __future__ import annotations

from typing import Any

import mmh3
import redis

from hotkeyd.contract import lua
from hotkeyd.keys import key_bytes

__all__ = ["ShardedCounter"]

_SEED = 0x5EED  # fixed: every process must route an id to the same shard

# The scripts are shared with every client language: spec/lua/sharded_take_*.lua.


class ShardedCounter:
    """An integer counter kept as ``shards`` Redis keys.

    Args:
        client: redis-py client (a ``RedisCluster`` works with the default hash tag).
        key: the logical counter name.
        shards: number of shard keys (1..1024).
        hash_tag: put ``{key}`` in every shard key so they share a cluster slot
            (needed for the one-script atomic :meth:`take` and the one-MGET read).
    """

    def __init__(
        self, client: redis.Redis, key: str, *, shards: int = 8, hash_tag: bool = True
    ) -> None:
        if not 1 <= shards <= 1024:
            raise ValueError(f"shards must be in 1..1024, got {shards}")
        self.client = client
        self.key = key
        self.shards = shards
        self.hash_tag = hash_tag
        self.keys = [f"{{{key}}}:{i}" if hash_tag else f"{key}:shard:{i}" for i in range(shards)]
        self._take_all = client.register_script(lua("sharded_take_all.lua"))
        self._take_one = client.register_script(lua("sharded_take_one.lua"))

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
        """The total over all shards (one MGET)."""
        return sum(int(v) for v in self.client.mget(self.keys) if v is not None)

    def set_total(self, total: int) -> None:
        """Spread ``total`` evenly over the shards (e.g. to load stock); one MSET."""
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        base, extra = divmod(total, self.shards)
        self.client.mset({k: base + (1 if i < extra else 0) for i, k in enumerate(self.keys)})

    def take(self, caller_id: Any, amount: int = 1) -> int | None:
        """Atomically take ``amount`` if that much remains in total.

        Returns the total left afterwards, or None (nothing taken) when short. The
        caller's shard is tried first so concurrent callers mostly touch different keys.
        """
        if amount < 1:
            raise ValueError(f"amount must be >= 1, got {amount}")
        first = self.shard_of(caller_id)
        if self.hash_tag:
            left = int(self._take_all(keys=self.keys, args=[first, amount]))
            return None if left < 0 else left
        for j in range(self.shards):
            k = self.keys[(first + j) % self.shards]
            if int(self._take_one(keys=[k], args=[amount])) >= 0:
                return self.value()
        return None

    def clear(self) -> None:
        """Delete every shard key."""
        self.client.delete(*self.keys)

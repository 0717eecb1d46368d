"""Settings and request preparation shared by the thread and asyncio guards.

Everything here is pure: it turns a call into script arguments and decides what a
Redis failure means. The two guards add only the I/O, so they cannot drift apart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from hotkeyd.conn.redis import REDIS_ERRORS, translate_redis_error  # (RedisClusterException too)
from hotkeyd.errors import ClientError, ConfigError
from hotkeyd.idempotency.errors import (
    DuplicateCompletionError,
    IdempotencyKeyError,
    IdempotencyUnavailable,
    LeaseLostError,
)
from hotkeyd.idempotency.keys import IdempotencyNames, check_key, fingerprint, record_digest
from hotkeyd.idempotency.outcome import Begin, Lease, Outcome
from hotkeyd.idempotency.store import DurableStore, StoredFinal
from hotkeyd.protocol.wire import Namespace
from hotkeyd.ratelog import RateLimitedLog

__all__ = [
    "REDIS_ERRORS",
    "FailMode",
    "GuardSettings",
    "GuardStats",
    "Prepared",
    "check_client",
    "duplicate",
    "from_store",
]

logger = logging.getLogger("hotkeyd.idempotency")
FailMode = Literal["closed", "open"]
Fingerprint = bytes | bytearray | memoryview | str


@dataclass(frozen=True)
class Prepared:
    """One ``begin`` call, validated: the key, its record name and the script arguments."""

    key: str
    digest: str
    record: str
    fingerprint: str
    keys: list[str]
    args: list[Any]


@dataclass
class GuardStats:
    """Counters of one guard: plain ints, read by ``IdempotencyMetrics`` at scrape time."""

    new: int = 0  # begin answers, by outcome (a waiting begin counts its final answer)
    in_progress: int = 0
    done: int = 0
    mismatch: int = 0
    takeovers: int = 0  # NEW after an earlier holder's lease ran out
    store_replays: int = 0  # DONE/MISMATCH answered by the durable store (Redis forgot)
    lease_lost: int = 0  # complete/fail/extend/release refused by the fencing token
    duplicates: int = 0  # completions refused by the store's unique key
    bad_input: int = 0  # keys refused by check_key
    unavailable: int = 0  # Redis/store failures (raised when closed, tolerated when open)

    def count(self, b: Begin) -> Begin:
        """Count ``b`` and return it."""
        name = b.outcome.value
        setattr(self, name, getattr(self, name) + 1)
        self.takeovers += b.takeover
        return b


@dataclass
class GuardSettings:
    """How long records live, how leases work, and what a Redis failure does.

    Args:
        lease: seconds a PROCESSING record belongs to its holder before another caller
            may take over. Longer than the operation's usual time (p99.9), shorter than
            ``ttl``; a long operation calls ``extend``.
        ttl: seconds a record lives (for retries to be replayed). Rule of thumb: the
            longest time a client keeps retrying, and at least 5x the longest operation.
        namespace: Redis names (records are ``<prefix>:idem:<digest>``).
        scope: a name that separates key spaces (e.g. per service or route).
        audit_maxlen: approximate cap of the audit stream; 0 turns auditing off.
        max_key_length: longest key accepted (characters). Keys built by the
            application (``operation_key``, ``gateway_key``) may be longer than the
            255 a client may send in an Idempotency-Key header (checked by the middleware).
        on_error: ``"closed"`` (default): a broken Redis raises
            :class:`~hotkeyd.idempotency.errors.IdempotencyUnavailable` and nothing runs;
            ``"open"``: the operation runs unguarded (duplicates possible) and the
            failure is logged and counted.
    """

    lease: float = 30.0
    ttl: float = 24 * 3600.0
    namespace: Namespace = field(default_factory=Namespace)
    scope: str = ""
    audit_maxlen: int = 10_000
    max_key_length: int = 1024
    on_error: FailMode = "closed"

    def __post_init__(self) -> None:
        if not 0.001 <= self.lease <= 365 * 86400:
            raise ConfigError(f"lease must be 0.001 s .. 1 year, got {self.lease}")
        if self.ttl < self.lease:
            raise ConfigError(
                f"ttl ({self.ttl} s) must be >= lease ({self.lease} s): a record must "
                "outlive its lease, or a slow holder's retry runs twice"
            )
        if self.on_error not in ("closed", "open"):
            raise ConfigError(f"on_error must be 'closed' or 'open', got {self.on_error!r}")
        if self.audit_maxlen < 0:
            raise ConfigError(f"audit_maxlen must be >= 0, got {self.audit_maxlen}")
        self.names = IdempotencyNames(self.namespace.prefix)
        self.stats = GuardStats()
        self._warn = RateLimitedLog(logger)

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.lease * 1000))

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl * 1000))

    def _audit_keys(self, record: str) -> list[str]:
        return [record, self.names.audit] if self.audit_maxlen else [record]

    def prepare(self, key: str, fp: Fingerprint, *, claim: bool = False) -> Prepared:
        """Validate one call and build the begin script's keys and arguments."""
        try:
            key = check_key(key, self.max_key_length)
        except (IdempotencyKeyError, TypeError):
            self.stats.bad_input += 1
            raise
        fps = fingerprint(fp)
        digest = record_digest(self.scope, key)
        record = self.names.record(digest)
        args = [fps, self.lease_ms, self.ttl_ms, key, self.audit_maxlen, "claim" if claim else ""]
        return Prepared(key, digest, record, fps, self._audit_keys(record), args)

    def peek_call(self, key: str) -> tuple[str, list[str]]:
        """The record of ``key`` and the fields a read-only look at it needs."""
        return self.prepare(key, b"").record, ["st", "fp", "res"]

    @staticmethod
    def peeked(reply: list[Any], fp: str) -> Begin | None:
        """A final record of the same request as DONE; anything else None (a peek never
        answers IN_PROGRESS or MISMATCH: the caller goes on with its own key)."""
        st, rec_fp, res = reply
        if st not in (b"D", b"F") or rec_fp is None or rec_fp.decode("ascii") != fp:
            return None
        return Begin(Outcome.DONE, result=bytes(res or b""), failed=st == b"F")

    def complete_call(
        self, lease: Lease, result: bytes, failed: bool, repair: bool = False
    ) -> tuple[list[str], list[Any]]:
        args = [
            lease.token,
            "F" if failed else "D",
            result,
            self.ttl_ms,
            self.audit_maxlen,
            "repair" if repair else "",
        ]
        return self._audit_keys(lease.record), args

    def release_call(self, lease: Lease) -> tuple[list[str], list[Any]]:
        return self._audit_keys(lease.record), [lease.token, self.audit_maxlen]

    def extend_call(self, lease: Lease, seconds: float | None) -> tuple[list[str], list[Any]]:
        ms = self.lease_ms if seconds is None else max(1, round(seconds * 1000))
        return [lease.record], [lease.token, ms]

    def tolerate(self, exc: BaseException, what: str) -> None:
        """Count a Redis or store failure during ``what``; raise it (closed) or log it (open)."""
        self.stats.unavailable += 1
        err = translate_redis_error(exc) if isinstance(exc, REDIS_ERRORS) else exc
        if self.on_error == "closed":
            raise IdempotencyUnavailable(f"idempotency guard unavailable ({what}): {err}") from exc
        self._warn.warning(f"open-{what}", "idempotency guard failing open on %s: %s", what, err)

    def store_fences(self, exc: LeaseLostError, store: DurableStore | None) -> bool:
        """Whether a ``complete`` Redis refused goes on to the durable store.

        Only when Redis has no record at all (a restart, a failover, an expiry): nobody
        else holds the key there, and the store's unique key decides between this result
        and any other holder's (:class:`DuplicateCompletionError` for the loser). A record
        taken over by another holder ("fenced") stays refused: that holder completes.
        """
        return store is not None and exc.reason == "gone"

    def failed(self, exc: BaseException, what: str, p: Prepared | Lease) -> Begin:
        """A failure during ``what``: raise (closed) or answer NEW, unguarded (open)."""
        self.tolerate(exc, what)
        return Begin(Outcome.NEW, lease=Lease(p.key, p.record, 0, p.fingerprint, guarded=False))

    def final_of(self, lease: Lease, result: bytes, failed: bool) -> StoredFinal:
        """The durable store's row for a completion."""
        digest = record_digest(self.scope, lease.key)
        return StoredFinal(digest, lease.key, lease.fingerprint, failed, lease.token, result)


def check_client(client: Any, settings: GuardSettings) -> None:
    """Refuse clients the guard cannot work with, with one clear line each."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kwargs = pool.connection_kwargs
    else:  # RedisCluster keeps them per node
        kwargs = getattr(client, "get_connection_kwargs", dict)()
    if kwargs.get("decode_responses"):
        raise ClientError("the idempotency guard needs a client with decode_responses=False")
    if isinstance(client, (RedisCluster, AsyncRedisCluster)) and settings.audit_maxlen:
        raise ConfigError(
            "on Redis Cluster the audit stream and the records live in different slots: "
            "pass audit_maxlen=0 (records alone work on a cluster)"
        )


def from_store(stored: StoredFinal, p: Prepared) -> Begin:
    """What ``begin`` answers when Redis had no record but the store has a final one."""
    if stored.fingerprint != p.fingerprint:
        return Begin(Outcome.MISMATCH)
    return Begin(Outcome.DONE, result=stored.result, failed=stored.failed)


def duplicate(lease: Lease, winner: StoredFinal) -> DuplicateCompletionError:
    """The error for a completion the store's unique key refused."""
    return DuplicateCompletionError(
        f"idempotency key {lease.key!r} was completed twice (Redis lost its record); "
        "the first result is kept",
        stored=winner.result,
    )

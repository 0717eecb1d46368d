"""The classic idempotency schemes over DB-API 2, in the caller's own transaction.

- :class:`ConsumedMessages`: consumer de-duplication for at-least-once queues (Kafka,
  RocketMQ, ...): the message id goes in the same transaction as the consumer's writes.
- :func:`transition`: state machine + compare-and-set on a version column, optionally
  fenced by a lease's token: MOVED / ALREADY / CONFLICT, never a silent 0 rows.
- :func:`insert_or_existing`: the unique-index backstop that answers with the row that
  is already there instead of an error.
- :func:`locked_row`: the pessimistic lock (``SELECT ... FOR UPDATE``; ``BEGIN
  IMMEDIATE`` on sqlite) as a context manager yielding the locked row, one transaction.

The Idempotency-Key token scheme is the guard itself (:mod:`hotkeyd.idempotency`).
"""

from __future__ import annotations

from hotkeyd.idempotency.schemes.consumer import ConsumedMessages
from hotkeyd.idempotency.schemes.lock import locked_row
from hotkeyd.idempotency.schemes.transition import Moved, Transition, transition
from hotkeyd.idempotency.schemes.unique import insert_or_existing

__all__ = [
    "ConsumedMessages",
    "Moved",
    "Transition",
    "insert_or_existing",
    "locked_row",
    "transition",
]

"""What a message's delivery result means for the counts it carries.

Nothing is lost silently, nothing is counted twice: a message keeps its counts until its
result is known; only a failure that certainly left nothing on the broker and that a
retry can fix sends them again (see :func:`never_appended_and_retriable`).
"""

from __future__ import annotations

from hotkeyd.conn.kafka import kafka_python

__all__ = ["Message", "never_appended_and_retriable"]


class Message:
    """One reporter message in flight and the counts it carries until its result is known."""

    __slots__ = ("items", "settled", "size", "total")

    def __init__(self, items: list[tuple[bytes, int]], size: int) -> None:
        self.items = items
        self.total = sum(n for _, n in items)
        self.size = size
        self.settled = False


def never_appended_and_retriable(exc: BaseException, queued: bool) -> bool:
    """Whether sending the same counts again is both useful and never a double count.

    An error raised by ``send()`` itself (no metadata, the buffer full) means the record was
    never queued. Of the errors a queued record's future fails with, only a retriable error
    the broker answered with says it did not append the records; a delivery timeout, a
    broken connection or a request timeout leaves the outcome unknown (at most once: drop).
    """
    if not getattr(exc, "retriable", False):
        return False
    if not queued:
        return True
    errors = kafka_python().errors
    return isinstance(exc, errors.BrokerResponseError) and not isinstance(
        exc, (errors.RequestTimedOutError, errors.NotEnoughReplicasAfterAppendError)
    )

"""An at-least-once Kafka consumer that applies each payment once (consumer de-duplication).

    python consumer.py BOOTSTRAP TOPIC GROUP DB [--crash-after-commit N]

Each record is a JSON payment ``{"id": ..., "account": ..., "cents": ...}``. The payment
id goes into the consumption table in the same sqlite transaction as the balance update;
the Kafka offset is committed only after that transaction. So:

- the process dies after the database commit but before the offset commit (here:
  ``--crash-after-commit N``, an ``os._exit`` after the Nth payment): Kafka redelivers,
  the id is found, the payment is not applied twice;
- it dies before the database commit: nothing of it was kept, the redelivery applies it;
- the producer sent a payment twice (its own retry): the second copy is skipped too.

Stops when no record came for 3 s (20 s before the first one).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import time
import warnings

from hotkeyd.idempotency.schemes import ConsumedMessages

with warnings.catch_warnings():  # kafka-python 3.0 imports a deprecated importlib API
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata


def open_db(path: str) -> tuple[sqlite3.Connection, ConsumedMessages]:
    db = sqlite3.connect(path, timeout=10)
    db.execute(
        "CREATE TABLE IF NOT EXISTS balances (account TEXT PRIMARY KEY, cents INTEGER NOT NULL)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS applied (payment TEXT NOT NULL)")  # no unique key
    db.commit()
    consumed = ConsumedMessages("consumed", consumer="payments")
    consumed.create_table(db)
    return db, consumed


def apply(db: sqlite3.Connection, consumed: ConsumedMessages, payment: dict[str, object]) -> bool:
    """One payment in one transaction with its id; False if it was applied before."""
    if not consumed.first_time(db, str(payment["id"])):
        db.rollback()
        return False
    db.execute(
        "INSERT INTO balances (account, cents) VALUES (?, ?)"
        " ON CONFLICT (account) DO UPDATE SET cents = cents + excluded.cents",
        (payment["account"], payment["cents"]),
    )
    db.execute("INSERT INTO applied (payment) VALUES (?)", (str(payment["id"]),))
    db.commit()
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("db")
    ap.add_argument("--crash-after-commit", type=int, default=0)
    args = ap.parse_args(argv)
    db, consumed = open_db(args.db)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        enable_auto_commit=False,  # the offset is committed after the database
        auto_offset_reset="earliest",
    )
    # Partition 0, assigned by hand: the committed offset of GROUP says where to resume
    # (a consumer group's rebalance would do the same, only slower after a crash).
    consumer.assign([TopicPartition(args.topic, 0)])
    seen = skipped = 0
    idle_until = time.monotonic() + 20  # before the first record
    try:
        while time.monotonic() < idle_until:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    seen += 1
                    skipped += not apply(db, consumed, json.loads(record.value))
                    if seen == args.crash_after_commit:
                        os._exit(3)  # after the database commit, before the offset commit
                    tp = TopicPartition(record.topic, record.partition)
                    # this record's offset, not the position (poll fetched a whole batch)
                    consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                    idle_until = time.monotonic() + 3
    finally:
        consumer.close()
    print(json.dumps({"records": seen, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

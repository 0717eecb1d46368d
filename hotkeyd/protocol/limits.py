"""The limits of the contract, read from ``spec/limits.json`` (their one owner).

Every cap that the daemon and the four clients enforce is written down once, in
``spec/limits.json``: TTLs, entries per message and per report, name lengths, the
2^32-1 count limit, seq rules, message sizes, and the client hot set's default bounds.
This module reads that file (the wheel ships a copy, see :func:`hotkeyd.protocol.contract.spec_dir`)
and exposes each value as a constant. The modules that enforce a limit import it from
here, so changing the file changes the behaviour of every part at once.
"""

from __future__ import annotations

import json
from typing import Any

from hotkeyd.protocol import contract

__all__ = [
    "AUTH_KEY_BYTES_MIN",
    "CLOCK_SKEW_S_MAX",
    "COUNT_MAX",
    "DB_MAX",
    "DEMAND_ENTRIES_MAX",
    "DEMAND_INTERVAL_MS_MAX",
    "DEMAND_REPORT_BYTES_MAX",
    "DEMAND_REPORT_INTERVAL_MS_MAX",
    "DEMAND_REPORT_INTERVAL_MS_MIN",
    "HOTSET_FORGET_IDLE_S",
    "HOTSET_INSTANCES_MAX",
    "HOTSET_KEYS_MAX",
    "HOTSET_KEYS_PER_INSTANCE_MAX",
    "HOTSET_TTL_MS_MAX",
    "IDEMPOTENCY_KEY_CHARS_MAX",
    "INSTANCE_MAX_AGE_S",
    "JSON_DEPTH_MAX",
    "MESSAGE_BYTES_MAX",
    "MESSAGE_ENTRIES_MAX",
    "NAME_CHARS_MAX",
    "SEQ_JUMP_MAX",
    "SEQ_MAX",
    "START_TIMEOUT_MS",
    "TTL_MS_MAX",
    "limit",
    "limits",
]


def limits() -> dict[str, int]:
    """Every limit of ``spec/limits.json``: name -> value."""
    doc: dict[str, Any] = json.loads((contract.spec_dir() / "limits.json").read_text("utf-8"))
    out: dict[str, int] = {}
    for name, spec in doc["limits"].items():
        value = spec["value"]
        if type(value) is not int:
            raise contract.ContractError(f"limits.json: {name} is not an integer: {value!r}")
        out[name] = value
    return out


_LIMITS = limits()


def limit(name: str) -> int:
    """The value of limit ``name``; :class:`KeyError` naming it when the file lacks it."""
    try:
        return _LIMITS[name]
    except KeyError:
        raise KeyError(f"spec/limits.json has no limit {name!r}") from None


SEQ_MAX = limit("seq_max")
JSON_DEPTH_MAX = limit("json_depth_max")
SEQ_JUMP_MAX = limit("seq_jump_max")
TTL_MS_MAX = limit("ttl_ms_max")
NAME_CHARS_MAX = limit("name_chars_max")
DB_MAX = limit("db_max")
MESSAGE_ENTRIES_MAX = limit("message_entries_max")
MESSAGE_BYTES_MAX = limit("message_bytes_max")
CLOCK_SKEW_S_MAX = limit("clock_skew_s_max")
INSTANCE_MAX_AGE_S = limit("instance_max_age_s")
HOTSET_TTL_MS_MAX = limit("hotset_ttl_ms_max")
HOTSET_KEYS_MAX = limit("hotset_keys_max")
HOTSET_KEYS_PER_INSTANCE_MAX = limit("hotset_keys_per_instance_max")
HOTSET_INSTANCES_MAX = limit("hotset_instances_max")
HOTSET_FORGET_IDLE_S = limit("hotset_forget_idle_s")
COUNT_MAX = limit("count_max")
START_TIMEOUT_MS = limit("start_timeout_ms")
DEMAND_ENTRIES_MAX = limit("demand_entries_max")
DEMAND_REPORT_BYTES_MAX = limit("demand_report_bytes_max")
DEMAND_INTERVAL_MS_MAX = limit("demand_interval_ms_max")
DEMAND_REPORT_INTERVAL_MS_MIN = limit("demand_report_interval_ms_min")
DEMAND_REPORT_INTERVAL_MS_MAX = limit("demand_report_interval_ms_max")
IDEMPOTENCY_KEY_CHARS_MAX = limit("idempotency_key_chars_max")
AUTH_KEY_BYTES_MIN = limit("auth_key_bytes_min")

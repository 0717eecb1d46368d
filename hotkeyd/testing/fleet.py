"""A fleet of app instances sending demand reports, for load tests and benchmarks.

Each :class:`FleetApp` plays one app instance whose local cache serves a fixed set of
hot keys: every call of :meth:`FleetApp.report` is its next report, byte for byte what
:meth:`hotkeyd.protocol.demand.DemandReport.dumps` (and so the SDK's reporter) sends,
signed with the reporter key when it has one. The entries are serialized once, so one
process can play thousands of apps at their real rate (one report per 250 ms each)::

    apps = make_fleet(1000, fleet_keys(500))
    for app in apps:
        r.publish(ns.demand_channel("d1"), app.report(time.time()))
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Sequence

from hotkeyd.protocol.auth import MessageAuth
from hotkeyd.protocol.demand import DEMAND_VERSION, DemandEntry

__all__ = ["FleetApp", "fleet_keys", "make_fleet"]


class FleetApp:
    """One simulated app instance: its name, its entries, its seq."""

    def __init__(
        self,
        app: str,
        entries: Sequence[DemandEntry],
        *,
        interval_ms: int = 250,
        auth: MessageAuth | None = None,
        seq: int = 0,
    ) -> None:
        self.app = app
        self.entries = tuple(entries)
        self.interval_ms = interval_ms
        self.auth = auth
        self.seq = seq
        name = json.dumps(app, ensure_ascii=False)
        self._head = f'{{"v":{DEMAND_VERSION},"type":"demand","app":{name},"seq":'.encode()
        body = json.dumps(
            [e.to_json() for e in self.entries], separators=(",", ":"), ensure_ascii=False
        )
        self._tail = f',"interval_ms":{interval_ms},"entries":{body}}}'.encode()

    def report(self, now: float) -> bytes:
        """The next report (seq + 1) with ``ts`` ``now``, signed when a key is set."""
        self.seq += 1
        ts = repr(round(now, 3)).encode()
        data = b'%s%d,"ts":%s%s' % (self._head, self.seq, ts, self._tail)
        return self.auth.sign(data) if self.auth is not None else data


def fleet_keys(n: int, length: int = 30, seed: int = 1) -> list[bytes]:
    """``n`` distinct keys of ``length`` bytes (``k:`` and random lower-case letters)."""
    rng = random.Random(seed)
    out: set[bytes] = set()
    while len(out) < n:
        out.add(("k:" + "".join(rng.choices(string.ascii_lowercase, k=length - 2))).encode())
    return sorted(out)


def make_fleet(
    apps: int,
    keys: Sequence[bytes],
    *,
    entries: int = 100,
    prefix: str = "app",
    auth: MessageAuth | None = None,
    seed: int = 1,
) -> list[FleetApp]:
    """``apps`` apps, each reporting ``entries`` keys drawn from ``keys`` (n of 1-50)."""
    rng = random.Random(seed)
    return [
        FleetApp(
            f"{prefix}-{i:05d}-{rng.getrandbits(32):08x}",
            [DemandEntry(k, rng.randint(1, 50)) for k in rng.sample(list(keys), entries)],
            auth=auth,
        )
        for i in range(apps)
    ]

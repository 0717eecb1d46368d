"""metrics.py says which gauges are read at scrape time; the service registers exactly those."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

import hotkeyd.metrics
from hotkeyd.daemon.config import Settings
from hotkeyd.daemon.service import Service
from hotkeyd.metrics import Metrics
from hotkeyd.publish.memory import MemoryPublisher


def test_the_docstring_names_the_scrape_time_gauges_the_service_registers() -> None:
    doc = hotkeyd.metrics.__doc__ or ""
    line = re.search(r"^Scrape-time gauges: (.*)\.$", doc, re.M)
    assert line, "metrics.py must list its scrape-time gauges"
    documented = set(re.findall(r"``(\w+)``", line.group(1)))
    metrics = Metrics(CollectorRegistry())
    Service(Settings(http_port=None), sources=[], publisher=MemoryPublisher(), metrics=metrics)
    assert documented == set(metrics._scrape._gauges)
    # and what it says is set per tick is a plain gauge, not a scrape-time one
    assert "hotkeyd_detector_hot_keys" not in documented
    assert "hotkeyd_detector_hot_keys" in doc

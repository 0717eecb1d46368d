"""What goes over the wire and into Kafka records: the Python side of ``spec/``.

Both halves use it (the daemon writes notifications and reads demand reports; the SDK
reads notifications and writes demand reports), so it imports nothing of either.

- :mod:`~hotkeyd.protocol.wire`: hot/cool notifications (v1), key encoding, ``Namespace``
  (every Redis key and channel name of a deployment).
- :mod:`~hotkeyd.protocol.demand`: demand reports, apps -> daemon.
- :mod:`~hotkeyd.protocol.auth`: the optional HMAC envelope of messages and snapshots.
- :mod:`~hotkeyd.protocol.keys`: what bytes a key is (the one rule every part follows).
- :mod:`~hotkeyd.protocol.formats`: Kafka record formats (key, raw, lines, json, reporter).
- :mod:`~hotkeyd.protocol.lines`: the counted-line grammar (``key<TAB>count``).
- :mod:`~hotkeyd.protocol.contract`: the JSON Schemas and Lua scripts of ``spec/``.
- :mod:`~hotkeyd.protocol.limits`: the limits of ``spec/limits.json`` (their one owner).
"""

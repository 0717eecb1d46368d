"""`hotkeyd demo`: the one-command tour must actually detect, notify and cool."""

from __future__ import annotations

import io
import shutil

import pytest

from hotkeyd.console.demo import HOT_KEY, NEXT_STEPS, SPARKS, run_demo


@pytest.mark.integration
@pytest.mark.parametrize("use_redis", [True, False], ids=["redis", "in-process"])
def test_demo_detects_notifies_and_cools(use_redis: bool) -> None:
    if use_redis and shutil.which("redis-server") is None:
        pytest.fail("redis-server is required for the demo test")
    frames: list[str] = []
    out = io.StringIO()
    summary = run_demo(
        duration=7.0,
        rate=40_000,
        universe=20_000,
        use_redis=use_redis,
        out=out,
        live=False,
        on_frame=frames.append,
    )
    assert summary.with_redis is use_redis
    assert summary.hot_keys_seen and set(summary.hot_keys_seen) == {HOT_KEY}
    assert summary.detection_latency is not None and 0 < summary.detection_latency < 1.5
    assert summary.cool_latency is not None
    assert summary.events > 100_000
    text = out.getvalue()
    assert "detection latency" in text and "events processed" in text
    # ... and it ends with what to try next (the last lines of `make run`)
    assert text.rstrip().endswith(NEXT_STEPS[-1]), text[-600:]
    # The live view showed the spike key as HOT with a sparkline history.
    hot_frames = [f for f in frames if "item:flash-sale" in f and "HOT" in f]
    assert hot_frames
    assert any(ch in hot_frames[-1] for ch in SPARKS[1:])
    if use_redis:
        # the app served the hot key from its cache and reported it: the key stayed hot
        # (one hot event, no flap) and the view showed the locally served share
        assert summary.hot_keys_seen == [HOT_KEY]
        assert summary.local_share is not None and summary.local_share > 0.5, summary
        assert "served locally" in text
        assert any(
            "%" in line and "item:flash-sale" in line for line in hot_frames[-1].splitlines()
        )

"""The py-spy summary: thread shares, idle frames set apart, busiest frames first."""

from __future__ import annotations

import pytest

from tools import pyspy_summary as pyspy

RAW = """\
thread (11): MainThread;Runner.run (asyncio/runners.py:118);fbank (frontend.py:214) 30
thread (11): MainThread;Runner.run (asyncio/runners.py:118) 10
thread (22): engine-cpu_0;_worker (thread.py:81);Session.run (ort.py:287) 50
thread (22): engine-cpu_0;_worker (thread.py:81) 10
not a sample line
"""


def test_threads_and_frames_are_summarised() -> None:
    summary = pyspy.summarise(pyspy.parse(RAW.splitlines()), top=3)
    assert summary["samples"] == 100
    engine = summary["threads"]["engine-cpu"]
    assert engine["share_of_samples"] == pytest.approx(0.6)
    assert engine["busy_share_of_thread"] == pytest.approx(50 / 60, abs=1e-3)
    assert engine["top_frames"][0] == {"frame": "Session.run", "share_of_thread": 0.833}
    main = summary["threads"]["MainThread"]
    # Ending in Runner.run is uvloop's native wait (epoll, or the GIL after it): not work.
    assert main["busy_share_of_thread"] == pytest.approx(30 / 40)
    assert [f["frame"] for f in main["top_frames"]] == ["fbank"]

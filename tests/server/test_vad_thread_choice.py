"""Whether live sessions' VAD gets its own thread: the flag, else only for a local GPU engine."""

from __future__ import annotations

import pytest

from engine.serving.builder import DeviceReport, EngineReport
from server.app import vad_on_thread
from server.config import load_config


def report(*devices: str) -> EngineReport:
    return EngineReport(
        model="tiny", test_model=True, backend="torch", load_s=0.0, warmup_s=0.0, max_batch=8,
        batch_curve=(), memory_budget=1 << 30, cost_scale=1.0,
        devices=tuple(DeviceReport(d, "torch", 1 << 30, None) for d in devices),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("devices", "remote", "expected"),
    [
        (("cpu",), False, False),  # 2 cores: the thread only added contention
        (("cuda:0",), False, True),  # the loop, not the GPU, held back 64 streams
        (("cuda:0", "cuda:1"), False, True),
        ((), True, False),  # replicas elsewhere: unmeasured, so the loop keeps it
    ],
)
def test_unset_puts_the_vad_on_a_thread_only_beside_a_local_gpu(
    devices: tuple[str, ...], remote: bool, expected: bool
) -> None:
    assert vad_on_thread(None, report(*devices), remote=remote) is expected


def test_unset_puts_a_workers_vad_on_a_thread() -> None:
    # A worker's engine is another process: its loop shares the GIL with the VAD alone.
    assert vad_on_thread(None, report("cpu"), remote=True, worker=True) is True
    assert vad_on_thread(False, report("cpu"), remote=True, worker=True) is False


@pytest.mark.parametrize("setting", [True, False])
def test_an_explicit_setting_wins_everywhere(setting: bool) -> None:
    for devices, remote in ((("cpu",), False), (("cuda:0",), False), ((), True)):
        assert vad_on_thread(setting, report(*devices), remote=remote) is setting


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {}, None),
        (["--vad-thread"], {}, True),
        (["--no-vad-thread"], {}, False),
        ([], {"SENSESTREAM_VAD_THREAD": "off"}, False),
        (["--vad-thread"], {"SENSESTREAM_VAD_THREAD": "off"}, True),
        ([], {"SENSESTREAM_VAD_THREAD": "auto"}, None),
    ],
)
def test_the_flag_is_on_off_or_unset(
    argv: list[str], environ: dict[str, str], expected: bool | None
) -> None:
    assert load_config(argv, environ).session.vad_thread is expected


def test_auto_is_refused_where_a_setting_must_be_on_or_off() -> None:
    with pytest.raises(ValueError, match="adaptive_partials must be true or false"):
        load_config([], {"SENSESTREAM_ADAPTIVE_PARTIALS": "auto"})

"""One nested config: flags, environment and TOML keys derived from its leaves."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from server.config import LEAVES, ServerConfig, build_parser, load_config, option_owners


def test_every_leaf_option_is_a_flag_an_env_variable_and_a_toml_key(tmp_path: Path) -> None:
    names = [f.name for kind in LEAVES.values() for f in dataclasses.fields(kind)]
    assert len(names) == len(set(names)), "option names must be unique across the leaves"
    flags = {a.dest for a in build_parser()._actions}
    assert set(names) <= flags
    config = load_config(["--max-batch", "3"], {"SENSESTREAM_PORT": "9000"})
    assert (config.engine.max_batch, config.listen.port) == ("3", 9000)
    toml = tmp_path / "server.toml"
    toml.write_text('[server]\nlog_level = "debug"\n[server.limits]\nmax_sessions = 7\n')
    assert load_config(["--config", str(toml)], {}).limits.max_sessions == 7


def test_precedence_is_command_line_then_environment_then_file(tmp_path: Path) -> None:
    toml = tmp_path / "server.toml"
    toml.write_text("[listen]\nport = 1111\n[session]\nend_silence_ms = 700\n")
    environ = {"SENSESTREAM_CONFIG": str(toml), "SENSESTREAM_PORT": "2222"}
    config = load_config(["--port", "3333"], environ)
    assert config.listen.port == 3333
    assert load_config([], environ).listen.port == 2222
    assert load_config([], environ).session.end_silence_ms == 700


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--partial-interval-ms", "50"], "interval_ms must be within"),  # PartialPolicy
        (["--early-final-ms", "-1"], "early_final_ms must be >= 0"),  # SessionConfig
        (["--budget-fraction", "0"], "budget_fraction must be within"),  # EngineConfig
        (["--device", "tpu"], "device"),  # engine.serving.devices
        (["--max-frame-bytes", "10"], "frame limits"),  # SessionLimits
        (["--protect-metrics"], "protect_metrics needs api_keys"),
        (["--port", "70000"], "port must be within"),
        (["--max-batch", "many"], "max_batch must be"),
        (["--idle-timeout-s", "soon"], "idle_timeout_s must be a number"),
        (["--max-batch", "0"], "max_batch must be within"),  # SchedulerConfig
        (["--max-wait-ms", "-5"], "max_wait_ms must be"),
        (["--metrics-port", "70000"], "metrics_port must be within"),
        (["--log-level", "loud"], "log_level must be one of"),
        (["--shutdown-timeout-s", "0"], "shutdown_timeout_s must be > 0"),
        (["--max-upload-seconds", "0"], "max_upload_seconds must be positive"),
        (["--token-secret", "s" * 31], "token_secret must be at least 32 bytes"),
        (["--token-secret", "s" * 32, "--token-secret-file", "f"], "not both"),
        (["--token-max-sessions", "0"], "token_max_sessions must be >= 1"),
        (["--commit", "always"], "commit mode must be one of pauses, off"),
        (["--commit-silence-ms", "500"], "commit_silence_ms must be below end_silence_ms"),
        (["--max-piece-ms", "500"], "max_piece_ms"),
        # A prefix that can never match (a dot segment, an encoded /) fails at start-up.
        (
            ["--webhook-allow", "https://h.example/a/../b/", "--webhook-secret", "s" * 16],
            "holds a dot segment",
        ),
        (
            ["--webhook-allow", "https://h.example/a%2fb/", "--webhook-secret", "s" * 16],
            "holds a dot segment",
        ),
    ],
)
def test_each_rule_is_checked_where_it_lives(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(argv, {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[engine]\nmodle = 'x'\n", "unknown option"),
        ("[server]\nport = 1\n[engine]\nthreads = 4\n", "put engine inside it"),
        ("[listen]\nport = true\n", "port must not be true or false"),
    ],
)
def test_toml_mistakes_are_refused(tmp_path: Path, text: str, message: str) -> None:
    toml = tmp_path / "server.toml"
    toml.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_config(["--config", str(toml)], {})


def test_flat_options_land_in_their_leaves() -> None:
    config = ServerConfig.from_options(port=0, max_batch="1", vad="webrtc", max_sessions=5)
    assert config.listen.port == 0 and config.engine.max_batch == "1"
    assert config.session.vad == "webrtc" and config.limits.max_sessions == 5
    assert option_owners()["shutdown_timeout_s"] is None
    with pytest.raises(ValueError, match="unknown option"):
        ServerConfig.from_options(prot=1)
    engine = config.engine_config("/models/x", tuning_cache=None)
    assert engine.max_batch == 1 and engine.max_segment_ms == config.session.max_segment_ms


def test_an_abbreviated_option_is_refused_not_taken_for_another(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_config(["--max-bat=8"], {})
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --max-bat=8" in capsys.readouterr().err


def test_a_short_or_unreadable_token_secret_file_stops_the_server_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from server.main import main

    short = tmp_path / "secret"
    short.write_text("s" * 31 + "\n", encoding="utf-8")
    for path in (short, tmp_path / "missing"):
        assert main(["--token-secret-file", str(path), "--port", "0"]) == 2
        assert capsys.readouterr().err.startswith("error: token secret: ")

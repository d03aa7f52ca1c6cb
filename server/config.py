"""Server configuration: one frozen dataclass built from CLI, environment and a TOML file.

Precedence: command line, then `SENSESTREAM_*` environment variables, then `--config`
TOML, then defaults. Nothing reads the environment outside `load_config`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.budget import parse_size
from engine.devices import parse_devices
from engine.model_dir import DEFAULT_MODEL_ID

ENV_PREFIX = "SENSESTREAM_"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Every server setting, with production defaults."""

    model: str = DEFAULT_MODEL_ID
    host: str = "127.0.0.1"
    port: int = 8765
    backend: str = "onnx"
    precision: str = "auto"
    device: str = "cpu"  # or several GPUs: cuda:0,cuda:1
    threads: int | None = None
    max_batch: str = "auto"
    max_wait_ms: float = 20.0
    memory_budget: str | None = None  # per device
    budget_fraction: float = 0.8  # of each GPU's free memory, when memory_budget is unset
    tensorrt: bool = False
    vad: str = "fsmn"
    end_silence_ms: int = 500
    max_segment_ms: int = 15_000
    min_speech_ms: int = 250
    preroll_ms: int = 100
    partial_interval_ms: int = 400
    adaptive_partials: bool = True
    max_partial_interval_ms: int = 2000
    # Partials re-decode only the last this-much audio (plus 500 ms of context); the text
    # before it is settled. 0 re-decodes the whole utterance every time.
    partial_hold_ms: int = 2000
    early_final_ms: int = 200  # decode once a pause is this long; 0 waits for the VAD
    shutdown_timeout_s: float = 30.0
    # With no real model at hand (and only for the default id), serve a random-weight test
    # model built once into test_model_cache (default ~/.cache/sensestream/models/test-SIZE).
    fallback_test_model: bool = True
    test_model_cache: str | None = None
    test_model_size: str = "full"
    # CPU start-ups reuse the batch size and cost scale measured by an earlier start on
    # this host with the same model and settings (kept under the cache folder).
    reuse_tuning: bool = True
    certfile: str | None = None
    keyfile: str | None = None
    log_level: str = "info"
    # Limits
    max_sessions: int = 256
    max_sessions_per_ip: int = 32
    max_frame_bytes: int = 256 * 1024
    max_text_bytes: int = 4096
    max_rate: float = 2.0
    max_replay_rate: float = 200.0
    max_session_s: float = 4 * 3600.0
    idle_timeout_s: float = 30.0
    max_pending_events: int = 256
    # Per-connection send buffering (kernel SO_SNDBUF and the library's write buffer):
    # None keeps the kernel's autotuning; a small value bounds what a slow reader can hold.
    send_buffer_bytes: int | None = None
    # Access
    api_keys: str | None = None
    api_keys_file: str | None = None
    allowed_origins: str | None = None
    protect_metrics: bool = False
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be within 0..65535")
        if self.test_model_size not in ("tiny", "full"):
            raise ValueError("test_model_size must be tiny or full")
        if self.vad not in ("fsmn", "webrtc"):
            raise ValueError("vad must be fsmn or webrtc")
        if self.max_batch != "auto" and not self.max_batch.isdigit():
            raise ValueError("max_batch must be 'auto' or a positive integer")
        if self.memory_budget is not None:
            parse_size(self.memory_budget)
        if not 0 < self.budget_fraction <= 1:
            raise ValueError("budget_fraction must be within (0, 1]")
        parse_devices(self.device)
        if self.send_buffer_bytes is not None and self.send_buffer_bytes < 1024:
            raise ValueError("send_buffer_bytes must be at least 1024")
        if self.early_final_ms < 0:
            raise ValueError("early_final_ms must be >= 0")
        if self.partial_hold_ms < 0:
            raise ValueError("partial_hold_ms must be >= 0")
        if not 100 <= self.partial_interval_ms <= self.max_partial_interval_ms:
            raise ValueError("partial_interval_ms must be within 100..max_partial_interval_ms")
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("TLS needs both certfile and keyfile")

    @property
    def origins(self) -> tuple[str, ...]:
        return tuple(o.strip() for o in (self.allowed_origins or "").split(",") if o.strip())

    @property
    def max_batch_value(self) -> int | None:
        return None if self.max_batch == "auto" else int(self.max_batch)

    @property
    def memory_budget_bytes(self) -> int | None:
        return None if self.memory_budget is None else parse_size(self.memory_budget)


FIELDS = {f.name: f for f in dataclasses.fields(ServerConfig)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m server", description="SenseStream real-time speech recognition server"
    )
    parser.add_argument("--config", type=Path, help="TOML file with any of the options below")
    for name, f in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            parser.add_argument(flag, default=None, help=f"default: {f.default}")
    return parser


def load_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> ServerConfig:
    """Merge file, environment and command line into one validated config."""
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    config_file = args.config or environ.get(ENV_PREFIX + "CONFIG")
    if config_file:
        values.update(_from_toml(Path(config_file)))
    for name in FIELDS:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = raw
    for name in FIELDS:
        cli = getattr(args, name)
        if cli is not None:
            values[name] = cli
    return ServerConfig(**{k: _coerce(k, v) for k, v in values.items()})


def _from_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read config file {path}: {exc}") from exc
    table = data.get("server", data)
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown option(s) in {path}: {', '.join(unknown)}")
    return {k.replace("-", "_"): v for k, v in table.items()}


def _coerce(name: str, value: Any) -> Any:
    """Strings from the CLI or environment to the field's type."""
    kind = str(FIELDS[name].type)
    if not isinstance(value, str):
        return str(value) if kind.startswith("str") and not isinstance(value, bool) else value
    if kind.startswith("bool"):
        lowered = value.lower()
        if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise ValueError(f"{name} must be true or false; got {value!r}")
        return lowered in ("1", "true", "yes", "on")
    if kind.startswith("int"):
        return int(value)
    if kind.startswith("float"):
        return float(value)
    return value


def cache_home(environ: Mapping[str, str]) -> Path:
    """This user's SenseStream cache folder."""
    return Path(environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "sensestream"


def default_test_model_cache(environ: Mapping[str, str], size: str = "full") -> Path:
    return cache_home(environ) / "models" / f"test-{size}"


def current_environ() -> Mapping[str, str]:
    """The process environment, read at the call site that asks (never at import)."""
    return os.environ

"""Server configuration: one nested, frozen config built from CLI, environment and TOML.

Four leaves (listen, limits, session, engine) hold every option; the command-line flags,
the `SENSESTREAM_*` variables and the TOML keys are all derived from the leaves' field
names, which are unique. Precedence: command line, then environment, then the `--config`
TOML file, then defaults. Each leaf validates its own fields once, mostly by building the
streaming or engine config that owns the rule. Nothing reads the environment outside
`load_config`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.backends.registry import BackendOptions
from engine.model.directory import DEFAULT_MODEL_ID
from engine.serving.budget import parse_size
from engine.serving.builder import EngineConfig
from engine.serving.devices import parse_devices
from engine.serving.scheduler import SchedulerConfig
from server import config_help
from server.engines.url import parse_engine_url
from server.hotwords_file import read_hotwords_file
from server.http.auth import OriginPolicy
from server.http.client_address import TrustedProxies
from server.http.client_secrets import MIN_SECRET_BYTES
from server.streams.webhooks import url_parts
from streaming.errors import InvalidFieldError
from streaming.limits import SessionLimits
from streaming.partials.policy import PartialPolicy
from streaming.pieces.policy import CommitPolicy
from streaming.protocols.audiohook.signature import decode_secret
from streaming.redaction.policies import Redaction, parse_policies
from streaming.segmenter import SegmenterConfig
from streaming.session import SessionConfig
from streaming.vad.types import VadConfig

ENV_PREFIX = "SENSESTREAM_"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@dataclass(frozen=True, slots=True)
class ListenConfig:
    """Where and how the server listens, and who may connect."""

    host: str = "127.0.0.1"
    port: int = 8765
    certfile: str | None = None
    keyfile: str | None = None
    # A separate plain-HTTP listener for /metrics and /stats, e.g. on a private interface.
    metrics_port: int | None = None
    metrics_host: str | None = None  # default: host
    api_keys: str | None = None
    api_keys_file: str | None = None
    # Browser Origins allowed beside the server's own page (comma-separated), `*` any
    # origin; docs/security.md says how the own page resists DNS rebinding.
    allowed_origins: str | None = None
    protect_metrics: bool = False
    # Twilio signs each Media Streams handshake with the account's auth token; set it
    # (best through SENSESTREAM_TWILIO_AUTH_TOKEN) and /twilio refuses unsigned ones.
    twilio_auth_token: str | None = None
    # Genesys signs each AudioHook handshake (RFC 9421) with the integration's client
    # secret (base64, as Genesys shows it); set it (best through
    # SENSESTREAM_AUDIOHOOK_CLIENT_SECRET) and /audiohook refuses unsigned ones with 401.
    audiohook_client_secret: str | None = None
    # Per-stream webhooks: URL prefixes a session may name (comma-separated), and the
    # secret that signs every body (both needed; without them webhooks are refused).
    webhook_allow: str | None = None
    webhook_secret: str | None = None
    # The address clients use (https://asr.example.com) when a proxy stands in front:
    # a signed handshake signs that URL, not the one the server sees.
    public_url: str | None = None
    # Proxies in front (comma-separated IPs and CIDRs, none by default): a request from one
    # of them is the client its X-Forwarded-For or Forwarded header names, for the per-IP
    # limits. Only list proxies that overwrite or append to that header: anyone else could
    # name any address.
    forwarded_allow_ips: str | None = None
    # Which of X-Forwarded-For and Forwarded those proxies write: the other one is then the
    # client's own and ignored. "both" reads each, and when they disagree believes neither.
    forwarded_headers: str = "both"
    # Client secrets (POST /v1/realtime/client_secrets) are signed with this (32+ bytes;
    # best through SENSESTREAM_TOKEN_SECRET or the file). Hosts that must take each
    # other's tokens share it; unset, each start makes a random one (tokens die with it).
    token_secret: str | None = None
    token_secret_file: str | None = None

    def audiohook_secret(self) -> bytes | None:
        """The AudioHook client secret's bytes, or None when handshakes go unchecked."""
        if self.audiohook_client_secret is None:
            return None
        return decode_secret(self.audiohook_client_secret)

    def __post_init__(self) -> None:
        # Raises for anything but IPs, CIDRs and the two header names.
        TrustedProxies.parse(self.forwarded_allow_ips, self.forwarded_headers)
        for name, port in (("port", self.port), ("metrics_port", self.metrics_port)):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{name} must be within 0..65535")
        if self.protect_metrics and not (self.api_keys or self.api_keys_file):
            raise ValueError(
                "protect_metrics needs api_keys or api_keys_file: with no keys, "
                "/metrics and /stats would stay open"
            )
        if self.metrics_host is not None and self.metrics_port is None:
            raise ValueError("metrics_host needs metrics_port")
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("TLS needs both certfile and keyfile")
        if bool(self.webhook_prefixes) != bool(self.webhook_secret):
            raise ValueError("webhooks need both webhook_allow and webhook_secret")
        if self.webhook_secret is not None and len(self.webhook_secret) < 16:
            raise ValueError("webhook_secret must be at least 16 characters")
        if self.public_url is not None and urlsplit(self.public_url).scheme not in (
            "http",
            "https",
        ):
            raise ValueError("public_url must be an http:// or https:// URL")
        self.origin_policy()  # a malformed allowed_origins entry fails at start-up
        self.audiohook_secret()  # so does a client secret that is not base64
        self._check_token_secret()
        for prefix in self.webhook_prefixes:
            parts = urlsplit(prefix)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("webhook_allow holds http:// or https:// URL prefixes")
            if not parts.path.endswith("/") or parts.query or "@" in parts.netloc:
                raise ValueError(
                    f"webhook_allow prefix {prefix!r} must end its path with / and hold no "
                    "user info or query (https://hooks.example.com/calls/)"
                )
            if url_parts(prefix) is None:  # else it would silently admit nothing
                raise ValueError(
                    f"webhook_allow prefix {prefix!r} holds a dot segment, an encoded / or \\, "
                    "or a port out of range"
                )

    def _check_token_secret(self) -> None:
        # The file is read where the secret is used (and checked at start by main).
        if self.token_secret is not None and self.token_secret_file is not None:
            raise ValueError("give token_secret or token_secret_file, not both")
        if self.token_secret is not None and len(self.token_secret.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"token_secret must be at least {MIN_SECRET_BYTES} bytes")

    @property
    def webhook_prefixes(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in (self.webhook_allow or "").split(",") if p.strip())

    @property
    def origins(self) -> tuple[str, ...]:
        return tuple(o.strip() for o in (self.allowed_origins or "").split(",") if o.strip())

    def origin_policy(self) -> OriginPolicy:
        """Which browser Origins may connect: the server's own page, and what is listed."""
        return OriginPolicy.from_settings(self.origins, self.public_url, self.host)

    @property
    def trusted_proxies(self) -> TrustedProxies:
        return TrustedProxies.parse(self.forwarded_allow_ips, self.forwarded_headers)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """What one client, one address and the whole server may take."""

    max_sessions: int = 256
    max_sessions_per_ip: int = 32
    max_frame_bytes: int = 256 * 1024
    max_text_bytes: int = 4096
    max_rate: float = 2.0
    max_replay_rate: float = 200.0
    max_session_s: float = 4 * 3600.0
    idle_timeout_s: float = 30.0
    # How long a v1 stream whose client dropped waits for it to resume (server/resume);
    # 0: the stream ends with its connection.
    resume_grace_s: float = 30.0
    max_pending_events: int = 256
    # Per-connection send buffering (kernel SO_SNDBUF and the library's write buffer):
    # None keeps the kernel's autotuning; a small value bounds what a slow reader can hold.
    send_buffer_bytes: int | None = None
    # The file API (POST /v1/audio/transcriptions): one upload's size, and how many run
    # at once (each holds a spooled file and a session; more wait with 429).
    max_upload_bytes: int = 512 * 2**20
    max_uploads: int = 4
    # One upload's audio: a small FLAC of hours of silence would hold a VAD (and the GIL)
    # for hours. Checked from the container's header, else while decoding (413).
    max_upload_seconds: float = 4 * 3600.0
    # Followers (/v1/streams/{id}/events): in all and from one address, and the finals
    # each live stream keeps for a follower that joins late.
    max_followers: int = 256
    max_followers_per_ip: int = 32
    stream_backlog: int = 500
    # Follower handshakes waiting (`?wait=`, up to 30 s) for their stream to start: bounded
    # apart, so waits cannot take the followers' slots, in all and from one address.
    max_waiting_followers: int = 64
    max_waiting_followers_per_ip: int = 16
    # The most sessions one client secret may open over its life (a mint may ask fewer).
    token_max_sessions: int = 10

    def __post_init__(self) -> None:
        self.session_limits()  # the per-session rules live in streaming.limits
        if self.max_followers < 1 or self.stream_backlog < 0:
            raise ValueError("max_followers must be >= 1 and stream_backlog >= 0")
        if (
            min(
                self.max_followers_per_ip,
                self.max_waiting_followers,
                self.max_waiting_followers_per_ip,
            )
            < 1
        ):
            raise ValueError(
                "max_followers_per_ip, max_waiting_followers and "
                "max_waiting_followers_per_ip must be >= 1"
            )
        if self.max_upload_bytes < 1024 or self.max_uploads < 1:
            raise ValueError("max_upload_bytes must be >= 1024 and max_uploads >= 1")
        if not self.max_upload_seconds > 0:
            raise ValueError("max_upload_seconds must be positive")
        if self.max_sessions < 1 or self.max_sessions_per_ip < 1 or self.max_pending_events < 1:
            raise ValueError("max_sessions, max_sessions_per_ip and max_pending_events >= 1")
        if self.send_buffer_bytes is not None and self.send_buffer_bytes < 1024:
            raise ValueError("send_buffer_bytes must be at least 1024")
        if self.token_max_sessions < 1:
            raise ValueError("token_max_sessions must be >= 1")
        if not 0 <= self.resume_grace_s <= 3600:
            raise ValueError("resume_grace_s must be within 0..3600")

    def session_limits(self) -> SessionLimits:
        return SessionLimits(
            max_frame_bytes=self.max_frame_bytes,
            max_text_bytes=self.max_text_bytes,
            max_rate=self.max_rate,
            max_replay_rate=self.max_replay_rate,
            max_session_s=self.max_session_s,
            idle_timeout_s=self.idle_timeout_s,
        )


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """How every session segments speech and when it asks for partials and finals."""

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
    # Commit text at the pauses inside an utterance ("pauses"), decoding each piece once,
    # or only at its end ("off"); a stream may choose (streaming/pieces/policy.py).
    commit: str = "off"
    commit_silence_ms: int = 100
    max_piece_ms: int = 6000
    # Label who spoke on every stream that does not say (v1 start.diarize); loads the
    # speaker encoder at start (without it, at the first stream that asks).
    diarize: bool = False
    # Give each final's tokens and words their confidence, and the final its score, on
    # every stream that does not say (engine.decoding.confidence); a stream may choose.
    confidence: bool = True
    # Live sessions' VAD runs on a thread of its own (server/live/vad_pump.py), not the loop.
    # None: only when the engine runs on a GPU (measured: on 2 CPU cores the thread only
    # adds contention; on a 16-core GPU host it took 64 streams from failing to passing).
    vad_thread: bool | None = None
    # Phrases every session's decoding favours, after its own (server/hotwords_file.py).
    hotwords_file: str | None = None
    # What every stream's text is redacted of (pci, ssn, numbers, phone, email; a stream
    # may add, never remove), and whether a mask of the same length replaces it.
    redact: str | None = None
    redact_mask: bool = False

    def __post_init__(self) -> None:
        if self.vad not in ("fsmn", "webrtc"):
            raise ValueError("vad must be fsmn or webrtc")
        if self.commit_silence_ms >= self.end_silence_ms:
            raise ValueError("commit_silence_ms must be below end_silence_ms")
        try:
            parse_policies(self.redact or "")
        except InvalidFieldError as exc:
            raise ValueError(f"redact: {exc}") from exc
        self.streaming(SessionLimits())  # the rules live in the streaming configs

    def streaming(
        self,
        limits: SessionLimits,
        model_name: str = "",
        test_model: bool = False,
        demo_model: bool = False,
    ) -> SessionConfig:
        """The session core's config for these settings."""
        return SessionConfig(
            vad=VadConfig(end_silence_ms=self.end_silence_ms),
            segmenter=SegmenterConfig(
                max_segment_ms=self.max_segment_ms,
                min_speech_ms=self.min_speech_ms,
                preroll_ms=self.preroll_ms,
            ),
            partials=PartialPolicy(
                interval_ms=self.partial_interval_ms,
                adaptive=self.adaptive_partials,
                max_interval_ms=self.max_partial_interval_ms,
                hold_ms=self.partial_hold_ms,
            ),
            limits=limits,
            model_name=model_name,
            test_model=test_model,
            demo_model=demo_model,
            early_final_ms=self.early_final_ms,
            commits=CommitPolicy(
                self.commit,
                commit_silence_ms=self.commit_silence_ms,
                max_piece_ms=self.max_piece_ms,
            ),
            hotwords=() if self.hotwords_file is None else read_hotwords_file(self.hotwords_file),
            redaction=Redaction(parse_policies(self.redact or ""), self.redact_mask),
            diarize=self.diarize,
            confidence=self.confidence,
        )


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Which model runs where, how batches form, and the test-model stand-in."""

    # `local` builds the engine in this process; `unix:PATH[,PATH…]` attaches to engine
    # processes on this host (`python -m server.engines.process --socket PATH`), and
    # `ray://auto` or `ray://HOST:PORT` to Ray Serve engine replicas (the options below then
    # describe those engines' build, done by those commands, not this process's).
    engine_url: str = "local"
    model: str = DEFAULT_MODEL_ID
    backend: str = "auto"  # ONNX Runtime on the CPU, torch on CUDA
    precision: str = "auto"
    device: str = "cpu"  # or several GPUs: cuda:0,cuda:1
    threads: int | None = None
    max_batch: str = "auto"
    max_wait_ms: float = 20.0
    # While live streams are active, file uploads get at most this share of each device's
    # time (they run at full speed without live streams): lower keeps live latency flatter.
    background_share: float = 0.02
    memory_budget: str | None = None  # per device
    budget_fraction: float = 0.8  # of each GPU's free memory, when memory_budget is unset
    tensorrt: bool = False
    # auto: on for the torch backend on CUDA. Features (fbank, LFR, CMVN) computed on the
    # GPU from raw audio, and CUDA graphs of the encoder replayed for small batches.
    device_features: str = "auto"
    cuda_graphs: str = "auto"
    # With no real model at hand (and only for the default id), serve a random-weight test
    # model built once into test_model_cache (default ~/.cache/sensestream/models/test-SIZE).
    fallback_test_model: bool = True
    test_model_cache: str | None = None
    test_model_size: str = "full"
    # CPU start-ups reuse the batch size and cost scale measured by an earlier start on
    # this host with the same model and settings (kept under the cache folder).
    reuse_tuning: bool = True

    def __post_init__(self) -> None:
        if self.max_batch != "auto" and not self.max_batch.isdigit():
            raise ValueError("max_batch must be 'auto' or a positive integer")
        if self.test_model_size not in ("tiny", "full"):
            raise ValueError("test_model_size must be tiny or full")
        parse_engine_url(self.engine_url)
        # The rules live in engine.serving: its builder, budget and scheduler.
        config = self.engine_config(self.model)
        batch = 1 if config.max_batch is None else config.max_batch
        SchedulerConfig(
            max_batch=batch, max_wait_ms=self.max_wait_ms, background_share=self.background_share
        )

    def engine_config(
        self, model: str, max_segment_ms: int = 15_000, tuning_cache: Path | None = None
    ) -> EngineConfig:
        """The engine builder's config for `model`."""
        return EngineConfig(
            model=model,
            backend=BackendOptions(
                backend=self.backend,
                precision=self.precision,
                device=self.device,
                threads=self.threads,
                tensorrt=self.tensorrt,
                device_features=self.device_features,
                cuda_graphs=self.cuda_graphs,
            ),
            max_batch=None if self.max_batch == "auto" else int(self.max_batch),
            max_wait_ms=self.max_wait_ms,
            background_share=self.background_share,
            memory_budget=None if self.memory_budget is None else parse_size(self.memory_budget),
            budget_fraction=self.budget_fraction,
            max_segment_ms=max_segment_ms,
            tuning_cache=tuning_cache if self.reuse_tuning else None,
        )


LEAVES: Mapping[str, type] = {
    "listen": ListenConfig,
    "limits": LimitsConfig,
    "session": SessionSettings,
    "engine": EngineSettings,
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Every server setting, with production defaults."""

    listen: ListenConfig = field(default_factory=ListenConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    session: SessionSettings = field(default_factory=SessionSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    shutdown_timeout_s: float = 30.0
    # On a drain, how long a session whose protocol can move (AudioHook's `reconnect`) is
    # given to go on elsewhere and close this one, before it is drained as any other.
    hand_off_s: float = 10.0
    log_level: str = "info"
    # Front-end worker processes: 1 is one process doing everything; N > 1 adds a
    # supervisor and one engine process per device (docs/deploy.md); `auto` is the usable
    # cores less one per engine process, at least 1.
    workers: str = "auto"

    def __post_init__(self) -> None:
        if not self.shutdown_timeout_s > 0:
            raise ValueError("shutdown_timeout_s must be > 0")
        if not 0 <= self.hand_off_s <= 600:
            raise ValueError("hand_off_s must be within 0..600")
        if self.workers != "auto" and not (self.workers.isdigit() and int(self.workers) >= 1):
            raise ValueError(f"workers must be 'auto' or a whole number >= 1; got {self.workers!r}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}")

    @classmethod
    def from_options(cls, **options: Any) -> ServerConfig:
        """Build from flat option names (`port=0`, `max_batch="1"`), as flags name them."""
        owners = option_owners()
        unknown = sorted(set(options) - set(owners))
        if unknown:
            raise ValueError(f"unknown option(s): {', '.join(unknown)}")
        grouped: dict[str, dict[str, Any]] = {name: {} for name in LEAVES}
        top: dict[str, Any] = {}
        for name, value in options.items():
            owner = owners[name]
            (top if owner is None else grouped[owner])[name] = value
        leaves = {name: LEAVES[name](**values) for name, values in grouped.items()}
        return cls(**leaves, **top)

    def engine_config(self, model: str, tuning_cache: Path | None) -> EngineConfig:
        config = self.engine.engine_config(model, self.session.max_segment_ms, tuning_cache)
        # With --diarize every stream needs the speaker encoder: loaded (and checked) at start.
        # With confidence on, the scored graph is made at start (else when a stream asks).
        speakers = True if self.session.diarize else None
        return replace(config, speakers=speakers, confidence=self.session.confidence)

    def worker_count(self, usable_cores: int) -> int:
        """How many worker processes: as set, or `auto`'s share of `usable_cores`."""
        if self.workers != "auto":
            return int(self.workers)
        engines = 0 if self.engine.engine_url != "local" else len(parse_devices(self.engine.device))
        return max(1, usable_cores - engines)


def option_owners() -> dict[str, str | None]:
    """Every option's name and the leaf that holds it (None: the top level)."""
    owners: dict[str, str | None] = {}
    for leaf, kind in LEAVES.items():
        for f in dataclasses.fields(kind):
            owners[f.name] = leaf
    for f in dataclasses.fields(ServerConfig):
        if f.name not in LEAVES:
            owners[f.name] = None
    return owners


def option_fields() -> dict[str, dataclasses.Field[Any]]:
    """Every option's dataclass field, by its name."""
    kinds = [*LEAVES.values(), ServerConfig]
    return {f.name: f for kind in kinds for f in dataclasses.fields(kind) if f.name not in LEAVES}


#: Shorter flags for some options.
ALIASES: Mapping[str, tuple[str, ...]] = {"engine_url": ("--engine",)}


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per option field, grouped by section, each with its help."""
    # No abbreviations: a misspelt option that is a prefix of a real one (`--max-bat`)
    # must be refused, not silently taken for it. The usage line stays short: listing all
    # ~60 options there would bury the description.
    parser = argparse.ArgumentParser(
        prog="python -m server",
        usage="%(prog)s [-h] [--config FILE] [--OPTION VALUE | --[no-]FLAG]...",
        description=config_help.DESCRIPTION,
        epilog=config_help.EPILOG,
        formatter_class=config_help.HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help=config_help.CONFIG_HELP)
    groups = {
        section: parser.add_argument_group(section, description)
        for section, description in config_help.SECTIONS.items()
    }
    owners = option_owners()
    for name, f in option_fields().items():
        group = groups[owners[name] or "server"]
        flags = ["--" + name.replace("_", "-"), *ALIASES.get(name, ())]
        text = _help(name, f)
        if f.type in ("bool", bool, "bool | None"):
            group.add_argument(
                *flags, action=argparse.BooleanOptionalAction, default=None, help=text
            )
        else:
            metavar = "N" if str(f.type).startswith(("int", "float")) else None
            group.add_argument(*flags, dest=name, default=None, metavar=metavar, help=text)
    return parser


def _help(name: str, f: dataclasses.Field[Any]) -> str:
    """An option's --help text: its meaning and values, then the field's default."""
    text = config_help.HELP.get(name, "")
    default = _default(f)
    if str(f.type).startswith("bool"):
        text += " (default: " + {True: "on", False: "off", None: "auto"}[default] + ")"
    elif default is not None:
        text += f" (default: {default})"
    elif "unset" not in text:  # else the text already says what unset means
        text += " (default: unset)"
    # argparse %-formats help text: a literal % must be doubled.
    return text.replace("%", "%%")


def load_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> ServerConfig:
    """Merge file, environment and command line into one validated config."""
    return config_from_args(build_parser().parse_args(argv), environ)


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> ServerConfig:
    """The config for `build_parser()`'s parsed `args`, over the file and environment."""
    fields = option_fields()
    values: dict[str, Any] = {}
    config_file = args.config or environ.get(ENV_PREFIX + "CONFIG")
    if config_file:
        values.update(_from_toml(Path(config_file), set(fields)))
    for name in fields:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = raw
    for name in fields:
        cli = getattr(args, name)
        if cli is not None:
            values[name] = cli
    return ServerConfig.from_options(**{k: _coerce(fields[k], v) for k, v in values.items()})


def _from_toml(path: Path, known: set[str]) -> dict[str, Any]:
    """Flat keys, or keys inside `[listen]`, `[limits]`, `[session]`, `[engine]` tables
    (all optionally under `[server]`)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read config file {path}: {exc}") from exc
    table = data.get("server", data)
    if "server" in data and len(data) > 1:
        others = ", ".join(sorted(k for k in data if k != "server"))
        raise ValueError(f"{path}: with a [server] table, put {others} inside it")
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if key in LEAVES and isinstance(value, dict):
            flat.update({k.replace("-", "_"): v for k, v in value.items()})
        else:
            flat[key.replace("-", "_")] = value
    unknown = sorted(set(flat) - known)
    if unknown:
        raise ValueError(f"unknown option(s) in {path}: {', '.join(unknown)}")
    return flat


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default if f.default is not dataclasses.MISSING else None


def _coerce(f: dataclasses.Field[Any], value: Any) -> Any:
    """Strings from the CLI or environment to the field's type."""
    kind = str(f.type)
    if isinstance(value, bool) and not kind.startswith("bool"):
        raise ValueError(f"{f.name} must not be true or false")
    if not isinstance(value, str):
        return str(value) if kind.startswith("str") else value
    if kind.startswith("bool"):
        lowered = value.lower()
        if lowered == "auto" and kind.endswith("None"):
            return None  # an optional setting's own choice, as when it is left unset
        if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
            raise ValueError(f"{f.name} must be true or false; got {value!r}")
        return lowered in ("1", "true", "yes", "on")
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
    except ValueError as exc:
        raise ValueError(f"{f.name} must be a number; got {value!r}") from exc
    return value


def cache_home(environ: Mapping[str, str]) -> Path:
    """This user's SenseStream cache folder."""
    return Path(environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "sensestream"


def default_test_model_cache(environ: Mapping[str, str], size: str = "full") -> Path:
    return cache_home(environ) / "models" / f"test-{size}"


def current_environ() -> Mapping[str, str]:
    """The process environment, read at the call site that asks (never at import)."""
    return os.environ

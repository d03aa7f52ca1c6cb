"""What `python -m server --help` says: each option's meaning and values, and its sections.

Kept apart from server/config.py so that the fields there stay readable as code; the
parser appends each option's default from its field, so defaults live in one place.
tests/server/test_config_help.py checks that every field has an entry here.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Mapping
from types import MappingProxyType


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Description and epilog as written; option help wrapped, never inside a --flag-name."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        # argparse's own wrapping breaks at hyphens: `--max-` / `partial-interval-ms`.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


DESCRIPTION = """\
Serve real-time speech recognition: WebSocket streams (SenseStream v1, FunASR,
OpenAI Realtime, Twilio, Genesys AudioHook), OpenAI's file API, a web page, and
/healthz, /readyz, /metrics and /stats."""

EPILOG = """\
Every option is also an environment variable, SENSESTREAM_<NAME>: --max-batch 4
is SENSESTREAM_MAX_BATCH=4. And it is a key in the --config TOML file, flat
(max_batch = 4) or in its section's table: [listen], [limits], [session] or
[engine]. The command line wins over the environment, which wins over the file;
defaults fill the rest. On/off options take true/false, 1/0, yes/no or on/off
there."""


#: The --config option, which is no config field.
CONFIG_HELP = (
    "TOML file with any of the options below (also SENSESTREAM_CONFIG); "
    "tables may sit under [server]"
)

#: One argument group per config section, in --help's order: its title (the section's
#: name) and a one-line description. `server` holds ServerConfig's own fields.
SECTIONS: Mapping[str, str] = MappingProxyType(
    {
        "listen": "Addresses, TLS, API keys and client secrets, origins, signatures, webhooks.",
        "limits": "What one client, one address and the whole server may take.",
        "session": "How sessions cut speech into utterances and when results come.",
        "engine": "Which model runs where, how requests batch, the test-model stand-in.",
        "server": "The process: workers, logging, shutdown (top-level TOML keys).",
    }
)

#: Each option's meaning and allowed values or range; the parser adds the default.
HELP: Mapping[str, str] = MappingProxyType(
    {
        # listen
        "host": "Address to listen on: an IP or host name; 0.0.0.0 is every interface.",
        "port": "Port for WebSocket and HTTP: 0..65535, 0 picks a free one.",
        "certfile": "PEM certificate: serve wss:// and https:// (needs --keyfile).",
        "keyfile": "PEM private key of --certfile.",
        "metrics_port": (
            "Serve /metrics and /stats on this plain-HTTP port instead: 0..65535 "
            "(/healthz and /readyz stay on both); unset: the main port."
        ),
        "metrics_host": (
            "Address the --metrics-port listener binds, e.g. a private interface; unset: --host."
        ),
        "api_keys": (
            "Require a key: comma-separated entries KEY, NAME:KEY or NAME:KEY:admin "
            "(keys of 16+ characters); unset, with no file: no key needed."
        ),
        "api_keys_file": "File of key entries as in --api-keys, one per line (# starts a comment).",
        "allowed_origins": (
            "Browser Origins allowed beside the server's own page, comma-separated "
            "(https://app.example.com); * allows any."
        ),
        "protect_metrics": (
            "Require an API key on /metrics and /stats (needs --api-keys or --api-keys-file)."
        ),
        "twilio_auth_token": (
            "Twilio auth token: /twilio then refuses handshakes without a valid "
            "X-Twilio-Signature. Best set as SENSESTREAM_TWILIO_AUTH_TOKEN."
        ),
        "audiohook_client_secret": (
            "Genesys AudioHook client secret (base64): /audiohook then refuses unsigned "
            "handshakes with 401. Best set as SENSESTREAM_AUDIOHOOK_CLIENT_SECRET."
        ),
        "webhook_allow": (
            "URL prefixes a stream's webhook may name: comma-separated http(s) URLs "
            "whose path ends in /; needs --webhook-secret."
        ),
        "webhook_secret": (
            "Secret that signs every webhook body (HMAC-SHA256): 16+ characters; "
            "needs --webhook-allow."
        ),
        "public_url": (
            "The http:// or https:// URL clients use when a proxy stands in front; "
            "signed handshakes sign that URL."
        ),
        "forwarded_allow_ips": (
            "Proxies in front (comma-separated IPs and CIDRs) whose X-Forwarded-For or "
            "Forwarded header names the client for per-IP limits; unset: none."
        ),
        "forwarded_headers": (
            "Which header the --forwarded-allow-ips proxies write: x-forwarded-for, "
            "forwarded, or both (each read; two that disagree name no one, and the proxy's "
            "address counts). Name the one: a client's copy of the other is then ignored."
        ),
        "token_secret": (
            "Secret that signs client secrets (POST /v1/realtime/client_secrets): 32+ bytes, "
            "the same on every host that takes the others' tokens; unset, with no file: a "
            "random one per start. Best set as SENSESTREAM_TOKEN_SECRET."
        ),
        "token_secret_file": (
            "File holding --token-secret (surrounding whitespace dropped); not with --token-secret."
        ),
        # limits
        "max_sessions": "Streaming sessions in all (more get server_full): 1 or more.",
        "max_sessions_per_ip": "Streaming sessions from one client address: 1 or more.",
        "max_frame_bytes": "Largest binary (audio) frame, in bytes: 1024 or more.",
        "max_text_bytes": "Largest text (JSON) frame, in bytes: 256 to 1048576 (1 MiB).",
        "max_rate": (
            "Audio seconds read per second from a live stream, after a 5 s burst; "
            "faster audio waits in the socket: 1..--max-replay-rate."
        ),
        "max_replay_rate": (
            'The same for streams sent with "pace": "replay": at least --max-rate.'
        ),
        "max_session_s": "Longest session, in seconds: above 0.",
        "idle_timeout_s": "Close a session that sends nothing for this many seconds: above 0.",
        "max_pending_events": (
            "Events queued for a client that does not read, before it is dropped "
            "(slow_client): 1 or more."
        ),
        "resume_grace_s": (
            "How long a v1 stream whose client's connection dropped waits for the client to "
            "resume it (start.resume with the token `ready` gave), its finals kept for it; "
            "0 ends the stream with its connection. A resume may land on any worker."
        ),
        "send_buffer_bytes": (
            "Per-connection send buffer (SO_SNDBUF and the WebSocket write buffer), "
            "in bytes: 1024 or more; unset: the kernel's autotuning."
        ),
        "max_upload_bytes": (
            "Largest upload to POST /v1/audio/transcriptions, in bytes: 1024 or more."
        ),
        "max_uploads": "File transcriptions running at once (more get 429): 1 or more.",
        "max_upload_seconds": (
            "Longest audio in one upload, in seconds (else 413 audio_too_long): above 0."
        ),
        "max_followers": "Followers of live streams (/v1/streams/{id}/events) in all: 1 or more.",
        "max_followers_per_ip": "Followers from one client address: 1 or more.",
        "stream_backlog": "Finals a live stream keeps for a follower that joins late: 0 or more.",
        "max_waiting_followers": (
            "Follower handshakes waiting (?wait=) for their stream to start, in all, "
            "apart from the followers: 1 or more."
        ),
        "max_waiting_followers_per_ip": "Waiting follower handshakes from one address: 1 or more.",
        "token_max_sessions": (
            "Most sessions one client secret may open over its life (a mint may ask fewer "
            "with max_sessions): 1 or more."
        ),
        # session
        "vad": "Voice activity detector: fsmn (FunASR's FSMN model) or webrtc (WebRTC's GMM).",
        "end_silence_ms": "Silence that ends an utterance, in ms: 50..10000.",
        "max_segment_ms": "Longest utterance; longer speech is cut there. In ms: 1000 or more.",
        "min_speech_ms": (
            "Speech shorter than this gets an empty final, not a decode. "
            "In ms: 0 up to below --max-segment-ms."
        ),
        "preroll_ms": "Audio kept before the detected start of speech, in ms: 0..2000.",
        "partial_interval_ms": (
            "New audio between partial results, in ms: 100..--max-partial-interval-ms."
        ),
        "adaptive_partials": (
            "Stretch the partial interval as the utterance grows, up to --max-partial-interval-ms."
        ),
        "max_partial_interval_ms": (
            "Longest interval between partials, in ms: at least --partial-interval-ms."
        ),
        "partial_hold_ms": (
            "Partials re-decode only the last this-much audio (plus 500 ms of context) "
            "and keep the text before it. In ms: 0 or more; 0 re-decodes the whole utterance."
        ),
        "early_final_ms": (
            "Decode the final once a pause is this long, before --end-silence-ms runs "
            "out. In ms: 0 or more; 0 waits for the VAD."
        ),
        "commit": (
            "pauses: commit an utterance's text at the pauses inside it (each piece decoded "
            "once, its text never withdrawn; the final is the pieces' text); off: only the "
            "final settles text. A stream may choose (v1 start.commit)."
        ),
        "commit_silence_ms": (
            "With --commit pauses, a pause this long inside an utterance commits the text "
            "before it. In ms: 50..5000, below --end-silence-ms."
        ),
        "max_piece_ms": (
            "With --commit pauses, speech that runs on this long without such a pause is "
            "cut where a pause has begun, else at its quietest 100 ms. In ms: above 600."
        ),
        "diarize": (
            "Label who spoke (speaker, and each speaker's turns) on every stream that does "
            "not say; a stream may choose (v1 start.diarize). On loads the speaker encoder "
            "at start; off loads it when a stream first asks."
        ),
        "confidence": (
            "Give every final's tokens and words a confidence and the final a score, on "
            "every stream that does not say (v1 start.confidence; OpenAI include logprobs). "
            "On makes the scored graph at start (ONNX: exported once, on a thread)."
        ),
        "vad_thread": (
            "Run live streams' VAD on a thread of its own, not the event loop; "
            "auto (unset, or auto in the environment or file): on when a local GPU decodes."
        ),
        "hotwords_file": (
            "Phrases every session's decoding favours, after its own: a file of one phrase "
            "a line, optionally a tab and its boost (0..10, default 2); # starts a comment."
        ),
        "redact": (
            "Redact from every stream's finals, partials, webhooks, followers and files: "
            "a comma list of pci (card numbers, expiry dates, security codes), ssn, "
            "numbers (4+ digits), phone, email. A stream may add policies, never remove."
        ),
        "redact_mask": "Redact with a mask of the same length (****) instead of [PCI].",
        # engine
        "engine_url": (
            "Where the engine runs: local (this process), unix:PATH[,PATH...] "
            "(engine processes on this host), ray://auto or ray://HOST:PORT (Ray Serve)."
        ),
        "model": (
            "Model: a local directory or a ModelScope id (downloaded once into the "
            "ModelScope cache)."
        ),
        "backend": (
            "Inference runtime: auto|onnx|torch (auto: ONNX Runtime on the CPU, torch on CUDA)."
        ),
        "precision": (
            "Numeric precision: auto|fp32|fp16|bf16|int8 (auto: int8 for ONNX and fp32 "
            "for torch on the CPU, fp16 on CUDA)."
        ),
        "device": "Where the model runs: cpu, cuda, cuda:N, or several GPUs as cuda:0,cuda:1.",
        "threads": "CPU threads for inference: 1 or more; unset: the runtime's choice.",
        "max_batch": "Most requests in one batch: auto (measured at start-up) or 1..256.",
        "max_wait_ms": "Longest a request waits for its batch to fill, in ms: 0 or more.",
        "background_share": (
            "While live streams run, file uploads get at most this share of each "
            "device's time (lower: flatter live latency): above 0, up to 1."
        ),
        "memory_budget": (
            "Activation memory per device, e.g. 4GiB or 512MiB; unset: "
            "--budget-fraction of free GPU memory, 2 GiB on the CPU."
        ),
        "budget_fraction": (
            "Share of each GPU's memory free after loading that the budget takes "
            "when --memory-budget is unset: above 0, up to 1."
        ),
        "tensorrt": "Add ONNX Runtime's TensorRT provider when installed (onnx on CUDA).",
        "device_features": (
            "Compute features (fbank, LFR, CMVN) on the device from raw audio: "
            "auto|on|off (auto: on for torch on CUDA; on needs --backend torch)."
        ),
        "cuda_graphs": (
            "Replay CUDA graphs of the encoder for small batches: auto|on|off "
            "(auto: on for torch on CUDA; on needs --backend torch --device cuda)."
        ),
        "fallback_test_model": (
            "When the default --model is not found, serve the clone's demo model or "
            "a random-weight test model instead."
        ),
        "test_model_cache": (
            "Folder the test model is built in, once; unset: ~/.cache/sensestream/models/test-SIZE."
        ),
        "test_model_size": "Test model to build: tiny (1.8 M parameters) or full (234 M).",
        "reuse_tuning": (
            "CPU start-ups reuse the batch size and cost scale an earlier start measured "
            "with the same model and settings."
        ),
        # server (top level)
        "shutdown_timeout_s": "Seconds SIGTERM waits for open streams to end: above 0.",
        "hand_off_s": (
            "On shutdown or reload, seconds an AudioHook session asked to reconnect (Genesys "
            "continues it on a new connection) has to close this one before it is ended as "
            "any other: 0 asks none; at most half of shutdown_timeout_s is used."
        ),
        "log_level": "Lowest level logged: debug|info|warning|error|critical.",
        "workers": (
            "Front-end processes: a number, 1 or more, or auto (usable cores less one per engine "
            "process, at least 1). More than 1 adds a supervisor and an engine per device."
        ),
    }
)

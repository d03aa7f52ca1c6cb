"""TLS, keys from a file, and access settings that would leave something open."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from sensestream.client import RefusedError, run_session
from tests.server.conftest import REPO
from tests.speech import Clip, to_s16le
from tools.spawn import ServerSpec, SpawnedServer, spawn

SR = 16000
KEYS = ("first-key-0123456789", "second-key-0123456789")


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, made now, and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def served(model: Path, *options: str) -> SpawnedServer:
    """A ready server on a free port with these options."""
    return spawn(
        ServerSpec(
            args=("--model", str(model), "--precision", "fp32", "--max-batch", "1", *options),
            cwd=REPO,
        )
    )


def speech(clips: list[Clip]) -> bytes:
    gap = np.zeros(SR // 2, np.float32)
    return to_s16le(np.concatenate([gap, clips[0].audio, gap, gap]))


def test_a_wss_session_gets_ready_a_final_and_end(
    tiny_model_dir: Path, tmp_path: Path, speech_clips: list[Clip]
) -> None:
    cert, key = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    with served(tiny_model_dir, "--certfile", str(cert), "--keyfile", str(key)) as server:
        assert server.url.startswith("wss://")
        outcome = asyncio.run(run_session(server.url, speech(speech_clips), ssl_context=trust))
        kinds = [e["type"] for e in outcome.events]
        assert kinds[0] == "ready" and kinds.count("final") == 1 and kinds[-1] == "end"
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP here
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5)


def test_keys_from_a_file_are_required_and_accepted(
    tiny_model_dir: Path, tmp_path: Path, speech_clips: list[Clip]
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# operators\n{KEYS[0]}  # alice\n\n{KEYS[1]}\n")
    with served(tiny_model_dir, "--api-keys-file", str(keys)) as server:
        with pytest.raises(RefusedError) as refused:
            asyncio.run(run_session(server.url, b""))
        assert refused.value.status == 401
        for key in KEYS:
            headers = {"Authorization": f"Bearer {key}"}
            outcome = asyncio.run(run_session(server.url, speech(speech_clips), headers=headers))
            assert len(outcome.of("final")) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--protect-metrics"], "protect_metrics needs api_keys or api_keys_file"),
        (["--api-keys-file", "/nonexistent/keys"], "error: api keys:"),
        (["--api-keys", "short"], "at least 16 characters"),
        (["--api-keys", " , "], "no API key in api_keys"),
        (["--metrics-host", "127.0.0.2"], "metrics_host needs metrics_port"),
    ],
)
def test_settings_that_would_leave_something_open_refuse_to_start(
    tiny_model_dir: Path, options: list[str], message: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "server", "--model", str(tiny_model_dir), "--port", "0", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_metrics_listener_binds_the_metrics_host(tiny_model_dir: Path) -> None:
    options = ("--metrics-port", "0", "--metrics-host", "127.0.0.2")
    with served(tiny_model_dir, *options) as server:
        line = next(
            text for text in server.output.text("stderr").splitlines() if "operational" in text
        )
        host, port = line.rsplit(" ", 1)[1].rsplit(":", 1)
        assert host == "127.0.0.2"
        with urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics", timeout=10) as answer:
            assert b"server_sessions" in answer.read()
        with pytest.raises(urllib.error.URLError):  # not on the main host
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)

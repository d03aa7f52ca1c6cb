"""The container image (deploy/container/Dockerfile): built from a clone, run, finals received.

Runs only under `make image-test` (SENSESTREAM_IMAGE_TEST=1): the build takes minutes the
first time. No registry is reachable here, so the base image the Dockerfile names is
made locally (debootstrap's minimal Debian bookworm, imported with podman under the name
`FROM` asks for); the image is built with `buildah bud --isolation chroot` and run with
`buildah run --isolation chroot` (podman's runtime cannot set rlimits on these machines).
Chroot isolation shares the host's network, so the server inside listens on a loopback
port of the host. Layers are kept, so a rebuild after a code change reuses the
dependency layers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.speech import synthesize

REPO = Path(__file__).resolve().parents[2]
BASE = "docker.io/library/debian:bookworm"
IMAGE = "localhost/sensestream:image-test"
DOCKERFILE = "deploy/container/Dockerfile"
BUILD_TIMEOUT_S = 1800
READY_TIMEOUT_S = 180

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("SENSESTREAM_IMAGE_TEST") != "1",
        reason="the image test runs under `make image-test` (SENSESTREAM_IMAGE_TEST=1)",
    ),
    # The first build (base, torch, dependencies) takes longer than a test's 600 s default.
    pytest.mark.timeout(BUILD_TIMEOUT_S + 600),
]


def run(*args: str, timeout: float = 600, **kwargs: object) -> str:
    """A command's standard output; a failure shows its output in the test's error."""
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )  # type: ignore[call-overload]
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args[:3])}… exited {done.returncode}:\n{done.stderr[-4000:]}")
    return str(done.stdout)


def ensure_base() -> None:
    """The Debian base `FROM` names, made once with debootstrap and kept."""
    if subprocess.run(["podman", "image", "exists", BASE], check=False).returncode == 0:
        return
    with tempfile.TemporaryDirectory(prefix="sensestream-rootfs-") as rootfs:
        run("debootstrap", "--variant=minbase", "bookworm", rootfs, timeout=900)
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        run("podman", "import", "-", BASE, stdin=tar.stdout, timeout=600)
        tar.wait(timeout=60)


def host_pip_options() -> list[str]:
    """Build options that give the image's pip what pip here has: this host's wheel folder
    (`PIP_FIND_LINKS`: torch's CPU wheel, as PyTorch's own index may be out of reach, as it
    is on CI here) and its CA bundle (`PIP_CERT`: a TLS-inspecting proxy's)."""
    volumes, options = [], []
    folder = os.environ.get("PIP_FIND_LINKS", "")
    if folder and any(Path(folder).glob("torch-*.whl")):
        volumes += ["--volume", f"{folder}:/build/wheels:ro", "--build-arg", "TORCH_SOURCE="]
        options += ["--find-links", "/build/wheels"]
    cert = os.environ.get("PIP_CERT", "")
    if cert and Path(cert).is_file():
        volumes += ["--volume", f"{cert}:/build/ca.crt:ro"]
        options += ["--cert", "/build/ca.crt"]
    if not options:
        return []
    return [*volumes, "--build-arg", f"PIP_OPTIONS={' '.join(options)}"]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image, built from a clone of this checkout's HEAD."""
    ensure_base()
    clone = tmp_path_factory.mktemp("image") / "clone"
    run("git", "clone", "--quiet", str(REPO), str(clone))
    run(
        "buildah", "bud", "--isolation", "chroot", "--pull=never", "--layers",
        "--format", "docker", "-f", DOCKERFILE, *host_pip_options(), "-t", IMAGE, str(clone),
        timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
    return IMAGE


@pytest.fixture(scope="module")
def config(image: str) -> dict[str, object]:
    """The image's Docker config: entrypoint, command, user, health check."""
    inspected = json.loads(run("buildah", "inspect", "--type", "image", image))
    found: dict[str, object] = inspected["Docker"]["config"]
    return found


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    name = run("buildah", "from", "--pull=never", image).strip()
    yield name
    subprocess.run(["buildah", "rm", name], capture_output=True, check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(container: str, config: dict[str, object]) -> Iterator[int]:
    """The image's own entrypoint and command, on a free loopback port of this host."""
    port = free_port()
    entry = [*config["Entrypoint"], *config["Cmd"]]  # type: ignore[misc]
    # The image's command listens on 0.0.0.0; here the host's loopback is enough.
    command = [*entry, "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        ["buildah", "run", "--isolation", "chroot", container, "--", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_ready(port, proc)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            pytest.fail(f"the server in the image exited {proc.returncode}:\n{err[-4000:]}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/readyz?wait=5", timeout=10
            ) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)  # not listening yet: the process is still starting
    pytest.fail(f"the server in the image was not ready within {READY_TIMEOUT_S} s")


def test_the_image_runs_as_a_user_with_a_readiness_health_check(
    config: dict[str, object], container: str
) -> None:
    assert config["User"] == "sensestream"
    uid = run("buildah", "run", "--isolation", "chroot", container, "--", "id", "-u")
    assert uid.strip() != "0"
    health = config["Healthcheck"]
    assert isinstance(health, dict) and "/readyz" in " ".join(health["Test"])
    assert config["Entrypoint"] == ["sensestream", "serve"]
    assert config["Cmd"] == ["--host", "0.0.0.0"]


def test_the_served_image_transcribes_a_recording(
    served: int, tmp_path: Path, config: dict[str, object], container: str
) -> None:
    wav = synthesize("your balance is forty two dollars", "en-us", tmp_path)
    answer = subprocess.run(
        [sys.executable, "scripts/stream_file.py", str(wav), "--url",
         f"ws://127.0.0.1:{served}/ws", "--speed", "0", "--format", "jsonl"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    finals = [json.loads(line) for line in answer.stdout.splitlines()]
    text = " ".join(str(f["text"]) for f in finals).lower()
    assert "balance" in text and "42" in text, finals
    # The image's health check passes against its running server.
    health = config["Healthcheck"]
    assert isinstance(health, dict)
    test = [str(part) for part in health["Test"]]
    assert test[0] == "CMD-SHELL"
    probe = test[1].replace("8765", str(served))
    run("buildah", "run", "--isolation", "chroot", container, "--", "sh", "-c", probe)

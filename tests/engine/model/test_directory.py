"""Model resolution: local dirs, missing files, offline ModelScope ids, weight verification."""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from engine.errors import ModelDirIncompleteError, ModelNotFoundError, WeightsMismatchError
from engine.model import directory as md
from engine.model.directory import load_model_dir, resolve_model
from engine.model.network import build_sensevoice, load_weights


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_local_dir_resolves(tiny_model_dir: Path) -> None:
    found = resolve_model(str(tiny_model_dir))
    assert found.path == tiny_model_dir.resolve()
    assert found.tokenizer_path.name == "chn_jpn_yue_eng_ko_spectok.bpe.model"
    assert found.is_test_model


def test_missing_files_are_all_listed(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tiny_model_dir, tmp_path / "broken")
    (broken / "am.mvn").unlink()
    (broken / "model.pt").unlink()
    with pytest.raises(ModelDirIncompleteError) as info:
        resolve_model(str(broken))
    assert "am.mvn" in str(info.value)
    assert "model.pt" in str(info.value)
    assert "--model" in str(info.value)


def test_nonexistent_path_is_not_treated_as_an_id(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))


class RecordingHub:
    """A ModelScope client double: an empty cache, and a download that records its calls."""

    def __init__(self, fetched: Path | None = None) -> None:
        self.downloads: list[str] = []
        self.fetched = fetched

    def __call__(self, model_id: str, *, local_files_only: bool = False) -> str:
        if local_files_only:
            raise FileNotFoundError("not cached")
        self.downloads.append(model_id)
        if self.fetched is None:
            raise ConnectionError("listing failed")
        return str(self.fetched)


def test_unreachable_hub_fails_at_once_without_a_download() -> None:
    hub = RecordingHub()
    with pytest.raises(ModelNotFoundError, match="did not answer within 3 s") as info:
        resolve_model("iic/SenseVoiceSmall", download=hub, reachable=lambda url, t: False)
    assert hub.downloads == [], "no download (and no retries) once the probe fails"
    assert "local directory" in str(info.value)


def test_reachable_hub_downloads_once(tiny_model_dir: Path) -> None:
    hub = RecordingHub(fetched=tiny_model_dir)
    found = resolve_model("iic/SenseVoiceSmall", download=hub, reachable=lambda url, t: True)
    assert found.path == tiny_model_dir.resolve()
    assert hub.downloads == ["iic/SenseVoiceSmall"]


def test_failed_download_names_the_cause() -> None:
    hub = RecordingHub()
    with pytest.raises(ModelNotFoundError, match="listing failed"):
        resolve_model("iic/SenseVoiceSmall", download=hub, reachable=lambda url, t: True)


class NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the hub's answer for an unknown id still proves it is up
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


def test_probe_counts_any_http_answer_and_not_a_mute_or_closed_port() -> None:
    with http.server.HTTPServer(("127.0.0.1", 0), NotFound) as hub:
        threading.Thread(target=hub.serve_forever, daemon=True).start()
        assert md.endpoint_reachable(f"http://127.0.0.1:{hub.server_port}/api/v1/models/x", 2.0)
        hub.shutdown()
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts, never answers
        started = time.monotonic()
        assert not md.endpoint_reachable(f"http://127.0.0.1:{mute.getsockname()[1]}/", 1.0)
        assert time.monotonic() - started < 2.0
        closed = mute.getsockname()[1]
    assert not md.endpoint_reachable(f"http://127.0.0.1:{closed}/", 1.0)


def test_probe_keeps_its_deadline_when_the_request_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    released, finished = threading.Event(), threading.Event()

    def hanging_open(url: str, timeout: float) -> object:
        try:
            released.wait(30)  # e.g. a resolver with no timeout of its own
            raise OSError("never")
        finally:
            finished.set()

    monkeypatch.setattr(urllib.request, "urlopen", hanging_open)
    try:
        assert not md.endpoint_reachable("https://hub.invalid/", 0.5)
        # It answered while the request still hung: it kept its own deadline.
        assert not finished.is_set()
    finally:
        released.set()


def test_probe_asks_the_endpoint_the_client_will_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", "http://mirror.invalid:8080")

    def reachable(url: str, timeout_s: float) -> bool:
        asked.append(url)
        return False

    with pytest.raises(ModelNotFoundError, match=r"mirror\.invalid"):
        resolve_model("iic/SenseVoiceSmall", download=RecordingHub(), reachable=reachable)
    assert asked == ["http://mirror.invalid:8080/api/v1/models/iic/SenseVoiceSmall"]


def test_real_offline_modelscope_fails_within_seconds_and_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The real client on a cache miss and the real probe of a hub that does not answer
    # (the session fixture points MODELSCOPE_ENDPOINT at a closed local port), both watched.
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    client, probe = md._modelscope_download("iic/SenseVoiceSmall"), md.endpoint_reachable
    downloads: list[bool] = []  # each call's local_files_only
    probes: list[float] = []  # each probe's deadline

    def watched_client(model_id: str, *, local_files_only: bool = False) -> str:
        downloads.append(local_files_only)
        return client(model_id, local_files_only=local_files_only)

    def watched_probe(url: str, timeout_s: float) -> bool:
        probes.append(timeout_s)
        return probe(url, timeout_s)

    monkeypatch.setattr(md, "_modelscope_download", lambda spec: watched_client)
    monkeypatch.setattr(md, "endpoint_reachable", watched_probe)
    with pytest.raises(ModelNotFoundError, match="--model"):
        resolve_model("iic/SenseVoiceSmall")
    # One look in the cache and one probe with its 3 s deadline; the network download,
    # where the client retries (and logs each retry), never started, so nothing can follow.
    assert downloads == [True]
    assert probes == [3.0]
    assert "retry" not in capfd.readouterr().err.lower()


def test_cached_modelscope_id_resolves(tiny_model_dir: Path) -> None:
    def cached(model_id: str, *, local_files_only: bool = False) -> str:
        assert local_files_only, "a cached id must not touch the network"
        return str(tiny_model_dir)

    assert resolve_model("iic/SenseVoiceSmall", download=cached).path == tiny_model_dir.resolve()


def test_mismatched_weights_are_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = copy_model(tiny_model_dir, tmp_path / "mismatch")
    state = torch.load(broken / "model.pt", weights_only=True)
    first = next(iter(state))
    state[first] = torch.zeros(3, 3)
    state.pop(list(state)[-1])
    state["extra.weight"] = torch.zeros(1)
    torch.save(state, broken / "model.pt")
    model_dir = load_model_dir(broken)
    with pytest.raises(WeightsMismatchError) as info:
        load_weights(build_sensevoice(model_dir), model_dir)
    text = str(info.value)
    assert "missing" in text and "unexpected" in text and "wrong shape" in text


def test_weights_really_come_from_the_file(tiny_model_dir: Path) -> None:
    model_dir = load_model_dir(tiny_model_dir)
    model = build_sensevoice(model_dir)
    load_weights(model, model_dir)
    state = torch.load(tiny_model_dir / "model.pt", weights_only=True)
    for key, value in state.items():
        assert torch.equal(model.state_dict()[key], value), key


def test_wrapped_state_dicts_load(tiny_model_dir: Path, tmp_path: Path) -> None:
    wrapped = copy_model(tiny_model_dir, tmp_path / "wrapped")
    state = torch.load(wrapped / "model.pt", weights_only=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, wrapped / "model.pt")
    model_dir = load_model_dir(wrapped)
    load_weights(build_sensevoice(model_dir), model_dir)


def test_onnx_path_names() -> None:
    assert md.ONNX_NAMES == {
        "fp32": "model.onnx",
        "int8": "model.int8.onnx",
        "fp16": "model.fp16.onnx",
    }

"""Resolve `--model` (a local dir or a ModelScope id) to a checked SenseVoiceSmall model dir."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from engine.errors import ModelDirIncompleteError, ModelNotFoundError

DEFAULT_MODEL_ID = "iic/SenseVoiceSmall"
DEFAULT_ENDPOINT = "https://www.modelscope.cn"
DEFAULT_TOKENIZER = "chn_jpn_yue_eng_ko_spectok.bpe.model"
TEST_MODEL_MARKER = "sensestream_test_model.json"
#: Marks the demo model trained here on synthetic speech (scripts/train_demo_model.py).
DEMO_MODEL_MARKER = "sensestream_demo_model.json"
ONNX_NAMES: Mapping[str, str] = {
    "fp32": "model.onnx",
    "int8": "model.int8.onnx",
    "fp16": "model.fp16.onnx",
}


def onnx_name(precision: str, scored: bool = False) -> str:
    """The file name of an export: `model.int8.onnx`, or `model.scored.int8.onnx`."""
    name = ONNX_NAMES[precision]
    return name.replace("model.", "model.scored.", 1) if scored else name


LOCAL_DIR_HINT = (
    "Point --model at a local directory holding model.pt, config.yaml, am.mvn, "
    "configuration.json and the tokenizer (for example a copy of iic/SenseVoiceSmall "
    "fetched on a machine with a network), or build a random-weight test model with "
    "`python -m engine.model.random_weights --size full --out models/test-full`."
)


@dataclass(frozen=True)
class ModelDir:
    """A validated model directory and the parts of its config the engine uses."""

    path: Path
    config: Mapping[str, Any]
    tokenizer_path: Path
    cmvn_path: Path
    weights_path: Path
    test_model: Mapping[str, Any] | None
    demo_model: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_test_model(self) -> bool:
        return self.test_model is not None

    @property
    def is_demo_model(self) -> bool:
        return self.demo_model is not None

    def onnx_path(self, precision: str, scored: bool = False) -> Path:
        """Where the ONNX export for `precision` lives inside this dir (`scored`: the one
        that also outputs each frame's best candidates, for hotwords)."""
        if precision not in ONNX_NAMES:
            raise ValueError(f"no ONNX model for precision {precision!r}")
        return self.path / onnx_name(precision, scored)


class SnapshotDownload(Protocol):
    """The shape of `modelscope.hub.snapshot_download.snapshot_download` that we use."""

    def __call__(self, model_id: str, *, local_files_only: bool = False) -> str: ...


class Reachable(Protocol):
    """Whether a network endpoint answers within a deadline (injectable for tests)."""

    def __call__(self, url: str, timeout_s: float) -> bool: ...


def resolve_model(
    spec: str,
    *,
    probe_timeout_s: float = 3.0,
    need_weights: bool = True,
    download: SnapshotDownload | None = None,
    reachable: Reachable | None = None,
) -> ModelDir:
    """Turn a local path or a ModelScope id into a validated `ModelDir`.

    An id is looked up in the local ModelScope cache first; only a miss touches the
    network, and only after one quick probe shows the hub answers, so a machine with no
    network fails within `probe_timeout_s` instead of sitting through the client's retries.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        return load_model_dir(path, need_weights=need_weights)
    if _looks_like_path(spec):
        raise ModelNotFoundError(f"model directory {spec!r} does not exist. {LOCAL_DIR_HINT}")
    fetch = download or _modelscope_download(spec)
    fetched = _from_modelscope(spec, fetch, reachable or endpoint_reachable, probe_timeout_s)
    return load_model_dir(fetched, need_weights=need_weights)


def load_model_dir(path: Path, *, need_weights: bool = True) -> ModelDir:
    """Check that `path` holds every file the engine reads, and list the missing ones."""
    meta = _read_json(path / "configuration.json")
    file_metas = meta.get("file_path_metas", {}) if isinstance(meta, dict) else {}
    tokenizer_name = file_metas.get("tokenizer_conf", {}).get("bpemodel", DEFAULT_TOKENIZER)
    cmvn_name = file_metas.get("frontend_conf", {}).get("cmvn_file", "am.mvn")
    weights_name = file_metas.get("init_param", "model.pt")
    wanted = ["configuration.json", "config.yaml", cmvn_name, tokenizer_name]
    if need_weights:
        wanted.append(weights_name)
    missing = [name for name in wanted if not (path / name).is_file()]
    if missing:
        raise ModelDirIncompleteError(
            f"model directory {str(path)!r} is missing {', '.join(missing)}. {LOCAL_DIR_HINT}"
        )
    config = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    if not isinstance(config, dict) or "encoder_conf" not in config:
        raise ModelDirIncompleteError(f"{path / 'config.yaml'} has no encoder_conf")
    marker, demo = path / TEST_MODEL_MARKER, path / DEMO_MODEL_MARKER
    return ModelDir(
        path=path.resolve(),
        config=config,
        tokenizer_path=path / tokenizer_name,
        cmvn_path=path / cmvn_name,
        weights_path=path / weights_name,
        test_model=_read_json(marker) if marker.is_file() else None,
        demo_model=_read_json(demo) if demo.is_file() else None,
    )


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelDirIncompleteError(f"{path} is not valid JSON: {exc}") from exc


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", ".", "~")) or spec.count("/") != 1


def _modelscope_download(model_id: str) -> SnapshotDownload:
    try:
        from modelscope.hub.snapshot_download import snapshot_download
    except ImportError as exc:
        raise ModelNotFoundError(
            f"{model_id!r} is not a local directory and modelscope is not installed. "
            f"{LOCAL_DIR_HINT}"
        ) from exc
    download: SnapshotDownload = snapshot_download
    return download


def _from_modelscope(
    model_id: str, download: SnapshotDownload, reachable: Reachable, probe_timeout_s: float
) -> Path:
    """Resolve an id through the local ModelScope cache, else download it once."""
    try:
        return Path(download(model_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - modelscope raises many types for "not cached"
        pass
    endpoint = _modelscope_endpoint()
    if not reachable(f"{endpoint.rstrip('/')}/api/v1/models/{model_id}", probe_timeout_s):
        raise ModelNotFoundError(
            f"{model_id!r} is not in the ModelScope cache and {endpoint} did not answer "
            f"within {probe_timeout_s:g} s (no network?). {LOCAL_DIR_HINT}"
        )
    try:
        return Path(download(model_id))
    except Exception as exc:  # reported with the hint, whatever the type
        raise ModelNotFoundError(
            f"could not download {model_id!r} from ModelScope: {exc}. {LOCAL_DIR_HINT}"
        ) from exc


def _modelscope_endpoint() -> str:
    """The hub the client will use (it honours MODELSCOPE_ENDPOINT, e.g. a mirror)."""
    try:
        from modelscope_hub.config import HubConfig
    except ImportError:
        return DEFAULT_ENDPOINT
    return str(HubConfig().endpoint or DEFAULT_ENDPOINT)


def endpoint_reachable(url: str, timeout_s: float) -> bool:
    """Whether the hub answers an HTTP request within `timeout_s` (any status counts).

    A request, not a bare connect: some networks accept every TCP connection, and a
    request goes through the same proxy settings as the download will. Name resolution
    has no timeout of its own, so the probe runs on a daemon thread and the deadline
    covers it all; a probe that outlives it is simply abandoned.
    """
    done = threading.Event()
    outcome: list[bool] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s):
                outcome.append(True)
        except urllib.error.HTTPError:
            outcome.append(True)  # it answered
        except (OSError, ValueError, http.client.HTTPException):
            outcome.append(False)
        finally:
            done.set()

    threading.Thread(target=probe, name="modelscope-probe", daemon=True).start()
    return done.wait(timeout_s) and bool(outcome) and outcome[0]

"""Typed engine errors; each carries a stable machine-readable code."""

from __future__ import annotations


class EngineError(Exception):
    """Base class for every error the engine raises on purpose."""

    code = "engine_error"


class ModelNotFoundError(EngineError):
    """A model id or directory could not be resolved to local files."""

    code = "model_not_found"


class ModelDirIncompleteError(EngineError):
    """A model directory lacks files the engine needs."""

    code = "model_dir_incomplete"


class WeightsMismatchError(EngineError):
    """Weights in the file do not match the architecture in the config."""

    code = "weights_mismatch"


class BackendUnavailableError(EngineError):
    """The requested backend, device or precision cannot run here."""

    code = "backend_unavailable"


class RequestError(EngineError):
    """A request the engine cannot take as it is: that request alone fails, not its batch."""

    code = "bad_request"


class AudioError(RequestError):
    """Audio that cannot be decoded: unreadable, empty, too short or non-finite."""

    code = "bad_audio"


class HotwordError(RequestError):
    """Hotwords the model cannot emit (characters outside its vocabulary)."""

    code = "unsupported_hotword"


class HotwordLimitError(HotwordError):
    """Hotwords too many or too long for one context graph (its size in tokens is capped).

    Same code as HotwordError: every protocol already refuses a stream's hotwords with it.
    """


class BackendOutOfMemoryError(EngineError):
    """The backend ran out of memory for a batch."""

    code = "out_of_memory"


class ReplicaLostError(EngineError):
    """A remote engine replica is gone (died, was replaced, or refused a call meant for it)."""

    code = "replica_lost"

    def __init__(self, replica: str, why: str) -> None:
        super().__init__(f"replica {replica} lost: {why}")
        self.replica = replica


class MisroutedError(EngineError, LookupError):
    """A call pinned to one replica reached another: the one it was meant for is gone."""

    code = "misrouted"


class NoReplicaError(EngineError):
    """No engine replica is attached, and the requests waiting for one are at their bound."""

    code = "no_replica"

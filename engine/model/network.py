"""Build funasr's SenseVoiceSmall from a model dir, load its weights strictly, add a CTC argmax."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from engine.errors import WeightsMismatchError
from engine.model.directory import ModelDir

FEATURE_DIM = 560
#: Candidates per frame that biased decoding searches (CTC prefix beam search).
TOPK = 8

_M = TypeVar("_M", bound=nn.Module)
VOCAB_SIZE = 25055
log = logging.getLogger("sensestream.engine")


def build_sensevoice(model_dir: ModelDir) -> nn.Module:
    """Construct the architecture the config describes, with no weights loaded yet."""
    return sensevoice_from_config(model_dir.config)


def sensevoice_from_config(config: Mapping[str, Any]) -> nn.Module:
    """funasr's SenseVoiceSmall built from a parsed config.yaml, with random weights."""
    model_conf = dict(config.get("model_conf") or {})
    model: nn.Module = _sensevoice_class()(
        encoder=config.get("encoder", "SenseVoiceEncoderSmall"),
        encoder_conf=dict(config["encoder_conf"]),
        input_size=FEATURE_DIM,
        vocab_size=int(config.get("vocab_size", VOCAB_SIZE)),
        **model_conf,
    )
    return model


def _sensevoice_class() -> Any:
    """Import funasr's model class with its import-time chatter kept off stdout.

    funasr prints a notice on stdout when ffmpeg is absent (we never use its audio
    loading), which would corrupt the JSON lines and captions our CLIs print there.
    The swap of `sys.stdout` is process-wide for the import's duration: nothing else may
    print meanwhile (the server prints its announcements before any model work).
    """
    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter):
        import funasr  # noqa: F401 - registers funasr's encoder classes in its tables
        from funasr.models.sense_voice.model import SenseVoiceSmall
    if chatter.getvalue().strip():
        log.debug("funasr said at import: %s", chatter.getvalue().strip())
    return SenseVoiceSmall


def load_weights(model: nn.Module, model_dir: ModelDir) -> None:
    """Load model.pt with every key and shape checked, then verify the copy.

    funasr's own loader skips mismatched keys with only a log line, which silently
    leaves random weights behind; here any mismatch is an error.
    """
    state = _read_state_dict(model_dir)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong_shape = sorted(
        k for k in set(state) & set(expected) if tuple(state[k].shape) != tuple(expected[k].shape)
    )
    if missing or unexpected or wrong_shape:
        raise WeightsMismatchError(
            f"{model_dir.weights_path} does not match config.yaml: "
            f"{_summarise('missing', missing)}{_summarise('unexpected', unexpected)}"
            f"{_summarise('wrong shape', wrong_shape)}"
        )
    model.load_state_dict(state, strict=True)
    loaded = model.state_dict()
    differing = [k for k, v in state.items() if not torch.equal(loaded[k], v.to(loaded[k].dtype))]
    if differing:
        raise WeightsMismatchError(f"weights did not load from the file: {differing[:5]}")


def _read_state_dict(model_dir: ModelDir) -> dict[str, torch.Tensor]:
    try:
        raw: Any = torch.load(model_dir.weights_path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise WeightsMismatchError(f"cannot read {model_dir.weights_path}: {exc}") from exc
    for key in ("state_dict", "model"):
        if isinstance(raw, Mapping) and isinstance(raw.get(key), Mapping):
            raw = raw[key]
    if not isinstance(raw, Mapping):
        raise WeightsMismatchError(f"{model_dir.weights_path} holds no state dict")
    return {k.removeprefix("module."): v for k, v in raw.items() if isinstance(v, torch.Tensor)}


def _summarise(label: str, keys: list[str]) -> str:
    if not keys:
        return ""
    more = f" (+{len(keys) - 5} more)" if len(keys) > 5 else ""
    return f"{label}: {', '.join(keys[:5])}{more}; "


class CtcArgmax(nn.Module):
    """SenseVoiceSmall's encoder with per-item prompts and the CTC argmax taken on device.

    Only int32 ids leave the device: the vocabulary-sized logits (about 100 KB per
    frame in fp32) never reach the host. The same module is exported to ONNX.
    """

    def __init__(self, sensevoice: nn.Module) -> None:
        super().__init__()
        self.embed = _submodule(sensevoice, "embed", nn.Embedding)
        self.encoder = _submodule(sensevoice, "encoder", nn.Module)
        self.ctc_lo = _submodule(_submodule(sensevoice, "ctc", nn.Module), "ctc_lo", nn.Linear)

    def forward(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        language: torch.Tensor,
        textnorm: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        encoder_out, out_lens = self.encode(speech, speech_lengths, language, textnorm)
        ids = self.ctc_lo(encoder_out).argmax(dim=-1).to(torch.int32)
        return ids, out_lens.to(torch.int32)

    def encode(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        language: torch.Tensor,
        textnorm: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's output after the four prompt frames are put in front."""
        batch = speech.size(0)
        language_query = self.embed(language.long()).unsqueeze(1)
        textnorm_query = self.embed(textnorm.long()).unsqueeze(1)
        # Event and emotion queries are rows 1 and 2 of the prompt table for every item.
        event_emotion = self.embed.weight[1:3].unsqueeze(0).expand(batch, -1, -1)
        prompts = torch.cat((language_query, event_emotion, textnorm_query), dim=1)
        x = torch.cat((prompts.to(speech.dtype), speech), dim=1)
        encoder_out, out_lens = self.encoder(x, speech_lengths + 4)
        if isinstance(encoder_out, tuple):
            encoder_out = encoder_out[0]
        return encoder_out, out_lens


class CtcTopK(nn.Module):
    """`CtcArgmax`'s outputs plus each frame's `k` best candidates and their
    log-probabilities (renormalised over the `k`).

    For biased (hotword) decoding, which searches beyond the argmax, and for confidence:
    only k ids and their log-probabilities per frame leave the device. The four prompt
    frames are included (their tags' posteriors give, e.g., the chance of no speech). It
    shares the argmax model's weights.
    """

    def __init__(self, argmax: CtcArgmax, k: int = TOPK) -> None:
        super().__init__()
        self.argmax = argmax
        self.k = k

    def forward(
        self,
        speech: torch.Tensor,
        speech_lengths: torch.Tensor,
        language: torch.Tensor,
        textnorm: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        encoder_out, out_lens = self.argmax.encode(speech, speech_lengths, language, textnorm)
        logits = self.argmax.ctc_lo(encoder_out)
        # One pass over the 25k outputs: the best id of every frame is its first candidate
        # (a separate argmax cost the demo model as much as the top-k itself). In fp32,
        # where half precision would blur the small differences the search ranks.
        best = logits.float().topk(self.k, dim=-1)
        ids = best.indices[..., 0].to(torch.int32)
        # Log-probabilities renormalised over each frame's k candidates: every hypothesis
        # takes one candidate a frame, so a frame's normaliser shifts them all alike and
        # the search ranks them the same, without an exp for each of the 25k outputs (a
        # log-softmax cost a third of the demo model's time). A trained model leaves
        # little mass outside its 8 best, so they serve as posteriors for confidence too.
        values = best.values - best.values.logsumexp(dim=-1, keepdim=True)
        return ids, out_lens.to(torch.int32), best.indices.to(torch.int32), values


def _submodule(parent: nn.Module, name: str, kind: type[_M]) -> _M:
    child = getattr(parent, name, None)
    if not isinstance(child, kind):
        raise WeightsMismatchError(f"model has no {kind.__name__} named {name!r}")
    return child


def load_ctc_argmax(model_dir: ModelDir) -> CtcArgmax:
    """Build, load and verify the model, ready for inference (eval mode, fp32, CPU)."""
    model = build_sensevoice(model_dir)
    load_weights(model, model_dir)
    return CtcArgmax(model).eval()

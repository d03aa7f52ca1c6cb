"""SenseVoice rich tags (`<|en|>`, `<|HAPPY|>`, ...): their ids, kinds and public values."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from engine.model.tokenizer import Tokenizer

#: Public value of a Transcript field whose tag the model did not emit.
UNKNOWN = "unknown"

TAG_OPEN = "<|"
TAG_CLOSE = "|>"


class TagKind(enum.Enum):
    """What a tag piece describes."""

    LANGUAGE = "language"
    EMOTION = "emotion"
    EVENT = "event"
    ITN = "itn"
    OTHER = "other"


# Tag name -> public plain-string value, per kind.
LANGUAGE_TAGS: Mapping[str, str] = MappingProxyType(
    {name: name for name in ("zh", "en", "yue", "ja", "ko", "nospeech")}
)
EMOTION_TAGS: Mapping[str, str] = MappingProxyType(
    {
        "HAPPY": "happy",
        "SAD": "sad",
        "ANGRY": "angry",
        "NEUTRAL": "neutral",
        "FEARFUL": "fearful",
        "DISGUSTED": "disgusted",
        "SURPRISED": "surprised",
        "EMO_UNKNOWN": UNKNOWN,
    }
)
EVENT_TAGS: Mapping[str, str] = MappingProxyType(
    {
        "Speech": "speech",
        "BGM": "bgm",
        "Applause": "applause",
        "Laughter": "laughter",
        "Cry": "cry",
        "Sneeze": "sneeze",
        "Breath": "breath",
        "Cough": "cough",
        "Sing": "sing",
        "Speech_Noise": "speech_noise",
        "Event_UNK": UNKNOWN,
        "GBG": "gbg",
    }
)
ITN_TAGS: Mapping[str, str] = MappingProxyType({"withitn": "withitn", "woitn": "woitn"})

KNOWN_TAGS: Mapping[TagKind, Mapping[str, str]] = MappingProxyType(
    {
        TagKind.LANGUAGE: LANGUAGE_TAGS,
        TagKind.EMOTION: EMOTION_TAGS,
        TagKind.EVENT: EVENT_TAGS,
        TagKind.ITN: ITN_TAGS,
    }
)


def tag_piece(name: str) -> str:
    """The piece spelling of a tag name, e.g. `en` -> `<|en|>`."""
    return f"{TAG_OPEN}{name}{TAG_CLOSE}"


def is_tag_piece(piece: str) -> bool:
    """True for any piece of the form `<|...|>`."""
    return (
        len(piece) > len(TAG_OPEN) + len(TAG_CLOSE)
        and piece.startswith(TAG_OPEN)
        and piece.endswith(TAG_CLOSE)
    )


@dataclass(frozen=True, slots=True)
class Tag:
    """One tag piece: its kind, name inside `<|...|>` and public value."""

    kind: TagKind
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class TagSummary:
    """The tag-derived fields of a Transcript."""

    lang: str
    emotion: str
    event: str
    itn: bool


@dataclass(frozen=True, slots=True)
class TagTable:
    """Maps token ids to tags; ids absent from the table are ordinary text."""

    by_id: Mapping[int, Tag]

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> TagTable:
        """Find every tag id in the tokenizer's vocabulary (ids are never hard-coded)."""
        by_id: dict[int, Tag] = {}
        for kind, names in KNOWN_TAGS.items():
            for name, value in names.items():
                token_id = tokenizer.piece_to_id(tag_piece(name))
                if token_id is not None:
                    by_id[token_id] = Tag(kind, name, value)
        # Unlisted `<|...|>` pieces (reserved slots, future tags) must never leak into text.
        for token_id, piece in enumerate(tokenizer.pieces()):
            if token_id not in by_id and is_tag_piece(piece):
                name = piece[len(TAG_OPEN) : -len(TAG_CLOSE)]
                by_id[token_id] = Tag(TagKind.OTHER, name, name)
        return cls(MappingProxyType(by_id))

    def kind(self, token_id: int) -> TagKind | None:
        """The tag kind of an id, or None for a text token."""
        tag = self.by_id.get(token_id)
        return None if tag is None else tag.kind

    def name(self, token_id: int) -> str | None:
        """The tag name of an id (`en`, `HAPPY`, ...), or None for a text token."""
        tag = self.by_id.get(token_id)
        return None if tag is None else tag.name

    def is_tag(self, token_id: int) -> bool:
        """True when the id is any `<|...|>` piece."""
        return token_id in self.by_id

    def summarise(self, ids: Iterable[int], requested_itn: bool) -> TagSummary:
        """Transcript tag fields from the first tag of each kind among the ids."""
        first: dict[TagKind, Tag] = {}
        for token_id in ids:
            tag = self.by_id.get(token_id)
            if tag is not None and tag.kind not in first:
                first[tag.kind] = tag
        itn_tag = first.get(TagKind.ITN)
        return TagSummary(
            lang=_value_or_unknown(first.get(TagKind.LANGUAGE)),
            emotion=_value_or_unknown(first.get(TagKind.EMOTION)),
            event=_value_or_unknown(first.get(TagKind.EVENT)),
            itn=requested_itn if itn_tag is None else itn_tag.name == "withitn",
        )


def _value_or_unknown(tag: Tag | None) -> str:
    return UNKNOWN if tag is None else tag.value

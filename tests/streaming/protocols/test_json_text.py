"""The one JSON reader every codec uses."""

from __future__ import annotations

import json

import pytest

from streaming.errors import MalformedMessageError
from streaming.protocols.json_text import load_object
from streaming.protocols.v1.codec import parse_client_text


def test_paired_surrogate_escapes_are_text() -> None:
    assert load_object('{"label": "\\ud83d\\ude00 agent"}') == {"label": "😀 agent"}
    assert load_object('{"path": "C:\\\\udata"}') == {"path": "C:\\udata"}  # not an escape


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDBFF!", "\\udc00", "x\\ud800\\u0041"])
def test_a_lone_surrogate_is_malformed(escape: str) -> None:
    # json.loads takes it, but the string could never be written out as UTF-8 again.
    with pytest.raises(MalformedMessageError):
        load_object('{"label": "' + escape + '"}')


def test_a_v1_start_with_a_lone_surrogate_label_is_refused_before_it_is_used() -> None:
    start = {"type": "start", "channels": 2, "multichannel": True}
    text = json.dumps(start)[:-1] + ', "channel_labels": ["\\ud800", "b"]}'
    with pytest.raises(MalformedMessageError):
        parse_client_text(text)

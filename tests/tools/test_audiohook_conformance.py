"""The conformance runner's own parts: the suite's config, put back after the run."""

from __future__ import annotations

import base64
import configparser
import re
from pathlib import Path

import pytest

from tools.audiohook_conformance import CONFIG, credentials, main, suite_config, suite_config_file


def test_the_config_points_the_suite_at_the_server_with_every_feature_on() -> None:
    parser = configparser.ConfigParser()
    parser.read_string(suite_config("ws://127.0.0.1:1234/audiohook", "k", "c2VjcmV0"))
    assert parser["EndPoint"]["url"] == "ws://127.0.0.1:1234/audiohook"
    assert dict(parser["Authentication"]) == {"apikey": "k", "clientsecret": "c2VjcmV0"}
    assert all(parser["Features"][f] == "true" for f in parser["Features"])
    assert len(parser["Features"]) == 3


def test_credentials_match_the_suites_patterns() -> None:
    key, secret = credentials()
    assert re.fullmatch(r"[a-zA-Z0-9+/_-]+={0,2}", key)  # the suite's API key check
    assert len(base64.b64decode(secret, validate=True)) == 32


def test_the_suites_own_config_comes_back_even_after_a_failure(tmp_path: Path) -> None:
    original = tmp_path / CONFIG
    original.write_text("[EndPoint]\nurl=[insert here]\n")
    with pytest.raises(RuntimeError), suite_config_file(tmp_path, "ours"):
        assert original.read_text() == "ours"
        raise RuntimeError("jest failed")
    assert original.read_text() == "[EndPoint]\nurl=[insert here]\n"
    original.unlink()
    with suite_config_file(tmp_path, "ours"):
        assert original.read_text() == "ours"
    assert not original.exists()  # none before, none after


def test_a_folder_that_is_not_the_reference_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main([str(tmp_path)])

"""The `server.replicas:app` builder's arguments, as a RayService config gives them."""

from __future__ import annotations

import pytest

from server.config import load_config
from server.replicas import _as_flags, replica_parser


def test_builder_args_become_the_commands_own_flags() -> None:
    args = {
        "replicas": 4,
        "gpus_per_replica": 1,
        "backend": "torch",
        "max_batch": "16",
        "fallback_test_model": False,
        "reuse_tuning": "true",
    }
    ours, rest = replica_parser().parse_known_args(_as_flags(args))
    config = load_config(rest, {})
    assert (ours.replicas, ours.gpus_per_replica) == (4, 1.0)
    assert config.engine.backend == "torch"
    assert config.engine.max_batch == "16"
    assert config.engine.fallback_test_model is False
    assert config.engine.reuse_tuning is True


def test_an_unknown_builder_arg_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    _, rest = replica_parser().parse_known_args(_as_flags({"replica": 2, "max_batch": 8}))
    with pytest.raises(SystemExit) as exit_info:
        load_config(rest, {})
    assert exit_info.value.code == 2  # argparse's usage error, not a crash
    # The misspelt builder arg is named, as the flag it became, and alone (max_batch is known).
    err = capsys.readouterr().err
    assert "error: unrecognized arguments: --replica=2\n" in err, err

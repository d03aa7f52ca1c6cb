"""`python -m server --help`: every option says what it means, its values and its default."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from engine.backends.registry import BACKEND_CHOICES, PRECISIONS, SWITCHES
from server.config import LOG_LEVELS, ServerConfig, build_parser, option_owners
from server.config_help import HELP, SECTIONS

DEFAULT = re.compile(r"\(default: [^)]*\)")


def config_leaves(kind: type = ServerConfig) -> set[str]:
    """Every non-dataclass field of the nested config, found by walking its field types."""
    names: set[str] = set()
    hints = typing.get_type_hints(kind)
    for f in dataclasses.fields(kind):
        inner = hints[f.name]
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            names |= config_leaves(inner)
        else:
            names.add(f.name)
    return names


def rendered_help(monkeypatch: pytest.MonkeyPatch) -> str:
    """--help as an 80-column terminal shows it."""
    monkeypatch.setenv("COLUMNS", "80")
    return build_parser().format_help()


def option_entries(text: str) -> dict[str, str]:
    """Each option's first flag and the help text argparse printed for it."""
    entries: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("  -"):
            flags, _, rest = line.strip().partition("  ")
            current = flags.split()[0].rstrip(",")
            entries[current] = rest.strip()
        elif current is not None and line.startswith("   "):
            entries[current] = (entries[current] + " " + line.strip()).strip()
        else:
            current = None
    return entries


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def help_of(name: str) -> str:
    """The help argparse holds for an option, as printed (%% undone)."""
    for action in build_parser()._actions:
        if action.dest == name:
            return (action.help or "").replace("%%", "%")
    raise AssertionError(f"no action for {name}")


def test_every_config_field_has_help_and_no_help_is_stale() -> None:
    leaves = config_leaves()
    assert leaves == set(option_owners()), "the walk must find what build_parser derives"
    assert sorted(leaves - set(HELP)) == [], "fields with no help"
    assert sorted(set(HELP) - leaves) == [], "help for fields that no longer exist"


def test_every_printed_option_says_more_than_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = option_entries(rendered_help(monkeypatch))
    assert set(entries) == {"-h", "--config", *(flag(n) for n in config_leaves())}
    for option, text in entries.items():
        meaning = DEFAULT.sub("", text).strip()
        assert len(meaning.split()) >= 3, f"{option} says only {text!r}"


def test_every_action_has_help_beyond_a_default() -> None:
    for action in build_parser()._actions:
        text = (action.help or "").strip()
        assert text and not re.fullmatch(r"\(?default: .*", text), action.option_strings


@pytest.mark.parametrize(
    ("name", "values"),
    [
        # The code's own lists, so a new choice there needs its help too.
        ("backend", ("|".join(BACKEND_CHOICES),)),
        ("precision", ("|".join(PRECISIONS),)),
        ("device_features", ("|".join(SWITCHES),)),
        ("cuda_graphs", ("|".join(SWITCHES),)),
        ("log_level", ("|".join(LOG_LEVELS),)),
        ("vad", ("fsmn", "webrtc")),
        ("test_model_size", ("tiny", "full")),
        ("workers", ("auto", "1 or more")),
        ("max_batch", ("auto", "1..256")),
        ("end_silence_ms", ("50..10000",)),
        ("port", ("0..65535",)),
        ("budget_fraction", ("above 0, up to 1",)),
    ],
)
def test_fixed_values_and_ranges_are_listed(name: str, values: tuple[str, ...]) -> None:
    text = help_of(name)
    missing = [v for v in values if not re.search(rf"(?<!\w){re.escape(v)}(?!\w)", text)]
    assert not missing, f"{name}'s help lacks {missing}: {text!r}"


def test_each_option_shows_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = option_entries(rendered_help(monkeypatch))
    assert "(default: auto)" in entries["--backend"]
    assert "(default: 8765)" in entries["--port"]
    assert "(default: on)" in entries["--reuse-tuning"]
    assert "(default: off)" in entries["--tensorrt"]
    assert "unset: --host" in entries["--metrics-host"]  # None says what unset means


def test_switches_print_both_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered_help(monkeypatch)
    assert "--tensorrt, --no-tensorrt" in text
    assert "--vad-thread, --no-vad-thread" in text


def test_options_are_grouped_by_section(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    groups = {g.title: g for g in parser._action_groups}
    assert set(SECTIONS) <= set(groups)
    for name, owner in option_owners().items():
        group = groups[owner or "server"]
        assert any(a.dest == name for a in group._group_actions), name
        assert group.description
    lines = rendered_help(monkeypatch).splitlines()
    assert [line for line in lines if line.rstrip(":") in SECTIONS] == [f"{s}:" for s in SECTIONS]


def test_help_fits_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    long = [line for line in rendered_help(monkeypatch).splitlines() if len(line) > 79]
    assert long == []


def test_help_names_the_environment_and_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "SENSESTREAM_<NAME>" in text and "--config" in text
    assert "command line wins over the environment, which wins over the file" in text


def test_help_changes_nothing_that_parses() -> None:
    args = build_parser().parse_args(["--engine", "local", "--no-tensorrt", "--port", "1"])
    assert (args.engine_url, args.tensorrt, args.port, args.model) == ("local", False, "1", None)

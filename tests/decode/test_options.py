"""Each option is declared once (specdec/options.py): the CLI's flags and help, a trace's settings
and the app's form, labels and hints are generated from the declarations, so every option is on
every surface, a value goes through all of them and comes back, and the CLI and the app describe
it in the same words."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from specdec import ConfigError, RunSettings, TraceFile
from specdec.cli import build_parser
from specdec.decode.settings import settings_from_args
from specdec.options import build, flat, option, options_of
from specdec_ui.state import (
    FIELD_LABELS,
    FORM,
    HINTS,
    form_defaults,
    form_values,
    parse_form,
)

OPTIONS = options_of(RunSettings)
CANDIDATES = {int: (1, 2), float: (0.5, 0.25), bool: (True, False), str: ("w1 w2", "tree")}


def other_value(o):
    """A value of the option's type (any text where it is a name) that is not its default and that
    its check accepts."""
    candidates = CANDIDATES.get(o.type, CANDIDATES[str])
    return next(v for v in candidates if v != o.default and (o.valid is None or o.valid(v)))


def command_line(o, value) -> list[str]:
    """``generate`` with the option set to ``value``, and the drafter that reads it."""
    args = ["generate"] + ([] if o.name == "prompt" else ["--prompt", "w1 w2"])
    args += ["--drafter", o.drafters[0]] if o.drafters else []
    return args + ([o.flag] if o.type is bool else [o.flag, str(value)])


@pytest.mark.parametrize("o", OPTIONS, ids=[o.name for o in OPTIONS])
def test_every_option_goes_from_the_command_line_through_a_trace_and_the_form_and_comes_back(o):
    value = other_value(o)
    settings = settings_from_args(build_parser().parse_args(command_line(o, value)))
    assert flat(settings)[o.name] == value
    raw = TraceFile(settings.to_dict(), (), 0.0, "", None).to_json()
    back = RunSettings.from_dict(TraceFile.from_json(raw).settings)
    assert back == settings
    if o.label is not None:
        assert parse_form(form_values(back)) == back
    else:  # not on the form: the app runs it at its default (the models: the pair it loaded)
        assert o.name not in form_values(back) and flat(parse_form(form_values(back)))[o.name] == o.default


def test_every_surface_lists_exactly_the_declared_options():
    names = {o.name for o in OPTIONS}
    assert len(names) == len(OPTIONS)  # the flat surfaces key the options by name
    assert set(vars(build_parser().parse_args(["generate", "--prompt", "w1"]))) - {"command", "json"} == names
    assert set(RunSettings("w1").to_dict()) == names
    assert FORM == tuple(o.name for o in OPTIONS if o.label is not None) == tuple(form_defaults())
    assert set(FORM) <= set(FIELD_LABELS) and set(FORM) <= set(HINTS)


def test_a_field_not_declared_as_an_option_is_refused():
    @dataclass(frozen=True)
    class Record:
        declared: int = option("a number", default=1)
        undeclared: int = 2

    with pytest.raises(TypeError, match="Record.undeclared is neither declared with option"):
        options_of(Record)


def test_the_command_lines_help_and_the_apps_hint_say_the_same_thing(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    shown = "".join(capsys.readouterr().out.split())  # argparse wraps lines, even at hyphens
    for o in OPTIONS:
        assert o.flag in shown and "".join(o.help.split()) in shown, o.name
        if HINTS.get(o.name) is not None:
            assert HINTS[o.name] == o.help
    # every field with a hint line shows the option's own words
    assert [n for n in FORM if HINTS[n] is not None] == [o.name for o in OPTIONS if o.label and o.type in (int, float, bool)]


@pytest.mark.parametrize("o", [o for o in OPTIONS if o.valid], ids=[o.name for o in OPTIONS if o.valid])
def test_a_bad_value_is_refused_naming_the_field_and_what_is_allowed(o):
    with pytest.raises(ConfigError) as e:
        build(RunSettings, {"prompt": "w1", o.name: object()})
    assert e.value.field == o.name and str(e.value).startswith(f"{o.name} must be {o.allowed} (got <object")


def test_a_run_without_the_draft_model_records_none_and_reads_back_as_none():
    d = RunSettings("w1", "lookup").to_dict()
    assert d["draft"] is None and d["draft_precision"] is None
    back = RunSettings.from_dict(d).models
    assert back.draft is None and back.draft_precision == "auto"

"""The page as plain functions (no real models, no browser): what every tab shows (the text by origin, the
legend, the CSS), the page's tabs and Start here, the loader, and the settings form: each field checked
with the run's own check and answered in the words on the screen."""
from __future__ import annotations

import re
from dataclasses import fields
from html import escape

import pytest
from helpers.ui import form, generation, shown_tokens, step, tree_form, visible_text

from specdec import DecodeConfig, ModelChoice
from specdec.teach.render import TOKEN_KINDS, output_text, segments
from specdec.trace import REJECTED, RESAMPLED
from specdec_ui import charts, views
from specdec_ui.markup import plain_html, token_html
from specdec_ui.state import (
    APP_PROMPT_TOKENS,
    FIELD_LABELS,
    FORM,
    Loader,
    Session,
    form_defaults,
)
from specdec_ui.tabs import compare as compare_tab
from specdec_ui.tabs import run as run_tab
from specdec_ui.tabs.compare import CompareView
from specdec_ui.tabs.run import RunView
from specdec_ui.tabs.step import SampleView, StepView
from specdec_ui.views import Problem


@pytest.mark.parametrize("seed,temperature,drafter,top_k,top_p", [
    (0, 1.0, "model", 0, 1.0), (1, 1.0, "model", 0, 1.0), (2, 0.7, "model", 8, 0.9), (3, 0.0, "model", 0, 1.0),
    (4, 1.0, "lookup", 0, 1.0), (5, 1.0, "none", 0, 1.0)])
def test_labels_cover_the_output_text_exactly(pair, seed, temperature, drafter, top_k, top_p):
    gen = generation(pair, seed, temperature, drafter, top_k, top_p)
    segs = segments(gen.rounds)
    assert output_text(segs) == gen.text
    assert {s.label for s in segs} <= set(TOKEN_KINDS)
    pieces = [p for r in gen.rounds for p in r.pieces if p]
    assert [s.text for s in segs if s.label != REJECTED] == pieces
    if drafter == "none":  # nothing drafted: every token is the verifier's own, never a "bonus"
        assert {s.label for s in segs} == {"plain"}


def test_rejected_drafts_sit_at_the_boundary_they_lost_and_add_nothing_to_the_text(pair):
    gen = generation(pair, seed=1)
    segs = segments(gen.rounds)
    rejected = [i for i, s in enumerate(segs) if s.label == REJECTED]
    assert rejected, "this seed should reject some drafts"
    for i in rejected:
        r = gen.rounds[segs[i].round]
        assert segs[i].text == r.positions[r.rejected_at].text and segs[i].position == r.rejected_at
        assert segs[i + 1].label == RESAMPLED and segs[i + 1].round == segs[i].round  # its replacement follows
        assert segs[i].p / segs[i].q < 1
    html = token_html(segs)
    drafts = re.findall(r'<del class="tok tok-rejected" tabindex="0" aria-label="([^"]*)"><span class="rej-text">'
                        r'(.*?)</span></del>', html, re.S)
    assert len(drafts) == html.count("<del ") == len(rejected)  # struck by element, not by matching a colour
    for (story, _), i in zip(drafts, rejected):  # the marker's story: the draft's text and why it is not there
        assert story.startswith(escape(repr(segs[i].text), quote=True)) and "the token after it took its place" in story
    assert [s.label for s in segs] == [kind for kind, _ in shown_tokens(html)]
    assert visible_text(html) == gen.text


def test_a_rejected_drafts_whitespace_is_markers_only_so_it_never_breaks_the_kept_text():
    """Shown inline, a rejected draft's line break or indentation would break the kept text's lines:
    inside its <del> only the markers stand for them, no space, tab or newline."""
    from specdec.teach.render import Segment
    segs = [Segment("x =", "accepted", 0, 0, 0.9, 0.9), Segment("\n\t  y", REJECTED, 0, 1, 0.1, 0.9),
            Segment(" 1", RESAMPLED, 0, 1, 0.5)]
    inner = re.search(r'<span class="rej-text">(.*?)</span></del>', token_html(segs), re.S).group(1)
    assert re.sub(r"<[^>]+>", "", inner) == "y"                   # the text without any whitespace
    assert inner.count('class="nl"') == 1 and inner.count('class="tab"') == 1 and inner.count('class="sp"') == 2


def test_text_keeps_its_shape_with_visible_whitespace_that_is_never_copied(pair):
    from specdec.teach.render import Segment
    segs = [Segment("def", "accepted", 0, 0, 0.9, 0.9), Segment("\n", "accepted", 0, 1, 0.9, 0.9),
            Segment("    ", "bonus", 0, 2, 0.9), Segment("return", "resampled", 1, 0, 0.5)]
    html = token_html(segs)
    assert '<span class="nl"></span>\n' in html and html.count('<span class="sp"> </span>') == 4  # marked, kept
    assert "return" in html and 'class="spec-tokens"' in html
    plain = plain_html("a b\n\tc")
    assert plain == '<pre class="spec-plain">a<span class="sp"> </span>b<span class="nl"></span>\n' \
                    '<span class="tab">\t</span>c</pre>'
    # the markers are drawn only on request (the page's "show whitespace" box), where the whitespace
    # itself is dropped (a rejected draft shown inline), or in Compare's token columns (where a
    # whitespace token would be a blank cell and its line break falls between columns)
    from specdec_ui.page import CSS
    drawn = [rule for rule in re.findall(r"([^{}]*)\{[^}]*content:", CSS) if re.search(r"\.(sp|tab|nl)::before", rule)]
    assert drawn and all(".show-whitespace" in rule and ".tok-rejected" in rule or rule.strip().startswith(".cmp-grid")
                         for rule in drawn), drawn


def test_a_token_of_backticks_or_whitespace_is_named_on_an_axis_and_small_numbers_keep_their_figures():
    assert [charts.token_label(t) for t in ("```", " ", "\n    ", "\t\t", "def", " x")] == [
        "3 backticks", "space", "newline, 4 spaces", "2 tabs", "'def'", "'·x'"]
    assert len(charts.token_label("\n " * 20)) == 24                                  # still short
    assert [charts.number(x) for x in (0.0042, 0.00042, 0.5, 0.0)] == ["0.004", "0.00042", "0.500", "0.000"]


def test_the_page_is_built_from_the_view_records(pair):
    from specdec_ui.page import build_demo
    demo = build_demo(Loader(ModelChoice.of(pair), pair))  # asserts every view field has its component
    assert demo.title == "Speculative decoding"
    assert tuple(form_defaults()) == FORM
    d = DecodeConfig()
    assert (form_defaults()["k"], form_defaults()["max_new_tokens"]) == (d.k, d.max_new_tokens)
    for record in (StepView, RunView, CompareView, SampleView):
        assert fields(record)


def test_every_child_of_the_pages_tabs_is_a_tab():
    """A state made beside the tabs (inside gr.Tabs, outside every gr.Tab) drew a tab's label twice in the row."""
    import gradio as gr

    from specdec_ui.page import build_demo
    demo = build_demo(Loader(ModelChoice()))
    tabs = [b for b in demo.blocks.values() if isinstance(b, gr.Tabs)]
    assert len(tabs) == 1 and [c.label for c in tabs[0].children] == ["Rule", "Step through", "Run", "Compare", "Race"]
    assert all(isinstance(c, gr.Tab) for c in tabs[0].children)


def test_the_start_here_steps_set_valid_settings_and_open_tabs_in_the_lessons_order():
    from specdec_ui import start
    from specdec_ui.page import EXAMPLES
    from specdec_ui.state import parse_form
    path = start.steps(EXAMPLES[0][0])
    assert [s.tab for s in path[:4]] == [start.RULE, start.STEP, start.RUN, start.COMPARE]
    assert [s.button[0] for s in path] == ["1", "2", "3", "4", "5"]
    for s in path:
        if s.settings is not None:
            settings = parse_form(s.settings)                      # the form it sets is one a run accepts
            assert settings.prompt == EXAMPLES[0][0] and settings.drafter == "model"
    assert path[1].settings == {**form_defaults(), "prompt": EXAMPLES[0][0]} and path[1].all_k
    assert parse_form(path[4].settings).decode.sampling.temperature == 0.8


def test_handlers_wait_for_the_models():
    loading = Loader(ModelChoice("embedded:none", None))
    assert step(loading, "draft", Session(), form()) == Problem(views.NOT_READY)
    assert list(run_tab.run(loading, Session(), form())) == [Problem(views.NOT_READY)]
    assert list(compare_tab.compare(loading, Session(), form())) == [Problem(views.NOT_READY)]


def test_loader_reports_a_bad_setting_instead_of_raising():
    loader = Loader(ModelChoice("embedded:none", None, device="quantum")).load_in_background().wait(30)
    assert loader.pair is None and "device" in loader.error


def test_the_loaders_timing_holds_the_models_lock_while_it_times_and_lets_it_go(tree_loader, monkeypatch):
    import threading

    import specdec.model.calibration
    monkeypatch.setattr(specdec.model.calibration, "cached", lambda key, cpu, measure: measure()["timings_ms"])
    monkeypatch.setattr(tree_loader, "step_fit", None)                         # restored after the test
    timing = threading.Thread(target=tree_loader._time_verification, daemon=True)
    timing.start()
    timing.join(120)
    assert not timing.is_alive(), "the timing waits on a lock it holds"       # its short runs take no lock of their own
    assert tree_loader.step_fit is not None and not tree_loader.pair.lock.locked()


def test_the_loader_times_this_machines_verifier_once_the_models_are_loaded(tree_loader, loader, monkeypatch):
    import specdec.decode.tree_shape
    monkeypatch.setattr(specdec.decode.tree_shape, "machine_costs", lambda pair: {"verify": [31.0, 4.1], "draft": [9, 1]})
    monkeypatch.setattr(tree_loader, "step_fit", None)                         # restored after the test
    tree_loader._time_verification()
    assert tree_loader.step_fit == (31.0, 4.1)
    loader._time_verification()                                                # not the lean forward: nothing timed
    assert loader.step_fit is None


@pytest.mark.parametrize("field,value", [
    ("k", 0), ("k", 33), ("k", None), ("k", 2.5), ("temperature", -1.0), ("temperature", 1e-45), ("top_k", -1),
    ("top_p", 0.0), ("top_p", 1.5), ("seed", -1), ("max_new_tokens", 0), ("max_new_tokens", 3.5), ("prompt", "  "),
    ("drafter", "oracle"), ("confidence", 1.0), ("draft_noise", -0.1), ("draft_noise", 1.5), ("draft_noise", None)])
def test_invalid_settings_give_a_message_in_the_words_on_the_screen_and_change_nothing_else(loader, field, value):
    s = Session()
    step(loader, "step", s, form())
    before = s.walk
    bad = form(**{field: value})
    for result in (step(loader, "step", s, bad), *run_tab.run(loader, s, bad), *compare_tab.compare(loader, s, bad)):
        assert isinstance(result, Problem) and result.field == field
        assert result.message.startswith(FIELD_LABELS[field]) and "(got None)" not in result.message
    assert s.walk == before
    assert isinstance(step(loader, "step", s, form()), StepView)  # still usable


def test_messages_name_the_label_say_empty_and_refuse_fractions(loader):
    empty = step(loader, "step", Session(), form(k=None))
    assert empty.message == "K (drafted tokens per round) is empty: enter an integer in [1, 32]."
    half = step(loader, "step", Session(), form(k=2.5))
    assert half.message == "K (drafted tokens per round) must be a whole number (got 2.5)."
    assert isinstance(step(loader, "step", Session(), form(k=3.0)), StepView)  # 3.0 is the integer 3


def test_the_app_limits_the_prompt_well_under_the_context(loader, monkeypatch):
    import specdec_ui.state
    assert APP_PROMPT_TOKENS == 2048  # the real pair's context is 32768
    monkeypatch.setattr(specdec_ui.state, "APP_PROMPT_TOKENS", 16)  # the tiny models hold only 256 positions
    problem = step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 17)))
    assert problem.field == "prompt" and problem.message.startswith(
        "Prompt must be at most 16 tokens in the app, which shares its models with every browser session (got 17")
    assert isinstance(step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 16))), StepView)
    too_long = step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 300)))
    assert too_long.field == "prompt" and too_long.message.startswith("Prompt must be")


@pytest.mark.parametrize("field,value,said", [
    ("tree_width", 9, "Tree width W (0 = this machine's choice) must be an integer in [1, 8], or 0"),
    ("tree_width", 2.5, "Tree width W (0 = this machine's choice) must be a whole number (got 2.5)"),
    ("tree_nodes", 65, "Tree nodes N (0 = this machine's choice) must be an integer in [1, 64], or 0"),
    ("tree_nodes", None, "Tree nodes N (0 = this machine's choice) is empty: enter an integer in [1, 64]")])
def test_the_tree_fields_are_checked_at_their_field_with_the_tree_drafter_only(tree_loader, field, value, said):
    problem = step(tree_loader, "step", Session(), tree_form(**{field: value}))
    assert isinstance(problem, Problem) and problem.field == field and problem.message.startswith(said)
    assert isinstance(step(tree_loader, "step", Session(), form(**{field: value})), StepView)  # hidden: not read


def test_the_tree_settings_round_trip_through_the_form():
    from specdec_ui.state import form_values, parse_form
    f = tree_form(tree_width=2, tree_nodes=12)
    settings = parse_form(f)
    assert (settings.decode.tree_width, settings.decode.tree_nodes) == (2, 12)
    assert form_values(settings) == f and set(form_values(settings)) == set(FORM)
    assert parse_form(form(tree_width=2)).decode.tree_width == 0              # another drafter: the default


@pytest.mark.parametrize("field,value", [
    ("k", 0), ("k", None), ("k", 2.5), ("temperature", 1e-45), ("top_k", -1), ("top_p", 1.5), ("seed", -1),
    ("max_new_tokens", 3.5), ("prompt", "  "), ("confidence", 1.0), ("draft_noise", None)])
def test_a_field_is_checked_alone_with_the_runs_own_check_and_words(loader, field, value):
    from specdec_ui.wiring import mistake
    problem = step(loader, "step", Session(), form(**{field: value}))
    assert mistake(loader, field, value) == problem.message            # the run's message, word for word
    assert mistake(loader, field, form()[field]) is None               # a value a run takes: no message


def test_the_field_check_covers_the_tree_fields_the_runs_and_the_prompts_length(loader, monkeypatch):
    import specdec_ui.state
    from specdec_ui.wiring import mistake
    assert mistake(loader, "tree_width", 9).startswith("Tree width W (0 = this machine's choice) must be an integer")
    assert mistake(loader, "tree_width", 2) is None
    (runs,) = list(compare_tab.compare(loader, Session(), form(), 6))
    assert mistake(loader, "runs", 6) == runs.message and mistake(loader, "runs", 2.0) is None
    monkeypatch.setattr(specdec_ui.state, "APP_PROMPT_TOKENS", 16)
    long = step(loader, "step", Session(), form(prompt=" ".join(["w1"] * 17)))
    assert mistake(loader, "prompt", " ".join(["w1"] * 17)) == long.message
    assert mistake(loader, "prompt", " ".join(["w1"] * 16)) is None


def test_a_message_and_the_alerts_about_it_go_once_the_field_holds_a_good_value(loader):
    import gradio as gr

    from specdec_ui.state import HINTS
    from specdec_ui.wiring import alert_follows, checked
    bad, fixed = checked(loader, "top_p", 1.5), checked(loader, "top_p", 1.0)
    assert bad["elem_classes"] == ["field-error"] and bad["info"] == "Top-p must be a number in (0, 1] (got 1.5)."
    assert fixed["elem_classes"] == [] and fixed["info"] == HINTS["top_p"]
    alert, about = alert_follows(loader, "top_p", 2.0, "top_p")              # another bad value: the alert says it
    assert about == "top_p" and alert.startswith("⚠ Top-p must be a number in (0, 1] (got 2.0).")
    assert alert_follows(loader, "top_p", 1.0, "top_p") == ("", None)         # fixed: the alert goes
    assert alert_follows(loader, "top_p", 1.0, "k") == (gr.skip(), gr.skip())  # an alert about another field stays


def test_a_fixed_field_without_a_hint_loses_its_message():
    """gradio reads info=None as "leave it": the prompt, which has no hint, kept its message once fixed."""
    from specdec_ui.wiring import hint
    assert hint("prompt")["info"] == "" and hint("prompt", "Prompt is empty.")["info"] == "Prompt is empty."
    assert hint("k")["info"] == HINTS_K


HINTS_K = "most tokens the draft proposes per round, 1 to 32 (a tree: its depth)"


def test_each_tab_is_a_module_of_tabs_named_once_in_the_page_built_alike_and_importing_no_other_tab():
    import ast
    import inspect
    from importlib import import_module
    from pathlib import Path

    from specdec_ui import page, start
    folder = Path(page.__file__).parent / "tabs"
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(page.TABS) == modules and len(set(page.TABS)) == len(page.TABS)  # a new tab: a file and a name
    assert {start.RULE, start.STEP, start.RUN, start.COMPARE} <= set(page.TABS)       # the tabs Start here opens
    for name in modules:
        assert list(inspect.signature(import_module(f"specdec_ui.tabs.{name}").build).parameters) == ["page", "tab_id"]
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                assert n.level == 0, f"tabs/{name}.py: a relative import"
                imported |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
        assert not [m for m in imported if m.startswith("specdec_ui.tabs")], f"tabs/{name}.py imports a tab"


def test_the_css_reads_the_one_styles_colours_and_marks_from_the_properties_the_page_writes():
    from specdec.teach import style
    from specdec_ui.page import CSS, PROPERTIES
    used = set(re.findall(r"var\(--spec-([\w-]+)\)", CSS))
    assert used and used <= set(PROPERTIES)                                    # nothing read that is not written
    assert f"--spec-fill-{REJECTED}: {style.FILL[REJECTED]};" in CSS and f'--spec-mark-space: "{style.MARKS[" "]}";' in CSS
    for kind in TOKEN_KINDS:                                                   # each kind of token: the style's fill
        assert re.search(rf"\.tok-{kind} \{{ background: var\(--spec-fill-{kind}\);", CSS), kind
    for colour in (style.FILL[k] for k in TOKEN_KINDS if k != "plain"):        # and written nowhere else
        assert CSS.count(colour) == 1, colour


def test_the_header_says_while_this_machines_costs_are_timed(pair):
    """After "models ready" the app times this machine's forwards once (a round pressed meanwhile waits):
    the header says so while it lasts, and the page keeps polling until it ends."""
    from specdec_ui.page import _progress_html
    from specdec_ui.state import Loader
    loader = Loader(ModelChoice.of(pair), pair)
    loader.timing = True
    assert "Now timing this machine's forward costs" in _progress_html(loader)
    loader.timing = False
    assert "timing" not in _progress_html(loader) and "Ready:" in _progress_html(loader)

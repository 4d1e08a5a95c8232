"""The Race tab as plain functions on tiny random models (no real models, no browser): a row per drafter,
the identical badges, the chart, the outputs coloured by proposer, a bad setting and Stop."""
from __future__ import annotations

import html
import re

import pytest
from helpers.ui import form

from specdec.decode.registry import DRAFTERS
from specdec.decode.suffix import session_pool
from specdec.teach import race as race_module
from specdec.teach.race import DEFINITIONS, RACERS
from specdec_ui import views
from specdec_ui.state import Session
from specdec_ui.tabs import race as race_tab
from specdec_ui.tabs.race import PROPOSERS, RaceView

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def pool(tree_loader):
    """The suffix tree's pool of the tree pair's verifier, empty before and after."""
    p = session_pool(tree_loader.pair.target_name)
    p.clear()
    yield p
    p.clear()


def pieces(page: str) -> list[tuple[str, str]]:
    """(proposer, text) of every coloured stretch of one output, as a reader sees it."""
    return [(who, html.unescape(re.sub(r"<[^>]+>", "", text)))
            for who, text in re.findall(r'<span class="race-by race-by-(\w+)"[^>]*>(.*?)</span>(?=<span class="race-by|'
                                        r"</div>)", page, re.S)]


def test_every_drafter_races_with_identical_badges_a_chart_and_outputs_coloured_by_proposer(tree_loader, pool):
    views_ = list(race_tab.race(tree_loader, Session(), form(temperature=0.0, max_new_tokens=12)))
    final = views_[-1]
    assert isinstance(final, RaceView) and final.badge.startswith("**Done:**") and all(
        v.chart is None for v in views_[:-1])
    labels = [DRAFTERS[d].label for d in RACERS]
    assert all(html.escape(label) in final.table for label in labels)
    # the verifier-only row is the baseline, every drafter's output identical to it
    assert final.table.count("✓ yes") == len(RACERS) - 1 and final.table.count("the baseline") == 1
    assert "NO" not in final.table and "Not run" not in final.table
    assert all(html.escape(name) in final.table for name in DEFINITIONS)
    assert list(final.chart.data[0].x) == labels and list(final.chart.data[1].x) == labels
    assert final.chart.data[0].y[0] == 1.0  # verifier-only against itself
    outputs = final.outputs.split('<p class="race-out-title">')[1:]
    assert len(outputs) == len(RACERS)
    texts = {"".join(t for _, t in pieces(o)) for o in outputs}
    assert len(texts) == 1 and texts.pop()  # every output the verifier-only one, coloured stretches joined
    assert {who for o in outputs for who, _ in pieces(o)} <= set(PROPOSERS)
    assert len(pool.documents) == 1  # the race joined the pool once, as the verifier-only run


def test_at_a_temperature_above_zero_nothing_is_claimed_and_a_drafter_these_models_cannot_run_is_skipped(loader):
    session_pool(loader.pair.target_name).clear()
    final = list(race_tab.race(loader, Session(), form(temperature=1.0, max_new_tokens=6)))[-1]
    # the tree and the self-drafter need the lean forward, which this pair's verifier has not
    assert final.table.count("sampled: not compared") == len(RACERS) - 3 and "✓ yes" not in final.table
    assert "Not run:" in final.table and final.table.count("needs the lean Qwen2 forward") == 2
    assert len(final.chart.data[0].x) == len(RACERS) - 2
    session_pool(loader.pair.target_name).clear()


def test_the_definitions_are_the_race_modules_words():
    doc = " ".join(race_module.__doc__.split())
    for name, words in DEFINITIONS.items():
        assert f"**{name}**: {words.split(' (')[0]}" in doc, name


def test_a_bad_setting_is_answered_at_its_field(loader):
    (bad,) = list(race_tab.race(loader, Session(), form(k=0)))
    assert bad.field == "k" and bad.message.startswith("K ")


def test_stop_ends_the_race_after_the_runs_that_finished(tree_loader, pool, monkeypatch):
    monkeypatch.setattr(views, "REFRESH_S", 0.01)
    s = Session()
    assert views.stop(s) == "Nothing is running."
    race = race_tab.race(tree_loader, s, form(temperature=0.0, max_new_tokens=12))
    for v in race:
        if v.table:  # the verifier-only run has finished: the next one is going
            break
    assert views.stop(s).startswith("Stopping")
    final = list(race)[-1]
    assert final.badge == race_tab.STOPPED and 1 <= final.table.count("<tr><th") < len(RACERS)
    assert final.chart is not None and pool.documents == []  # the pool as it was
    assert views.stop(s) == "Nothing is running."


def test_a_race_on_a_busy_machine_says_its_speeds_are_unreliable(loader, monkeypatch):
    session_pool(loader.pair.target_name).clear()
    monkeypatch.setattr(race_tab.CpuShare, "others", lambda self: 0.5)
    final = list(race_tab.race(loader, Session(), form(max_new_tokens=4)))[-1]
    assert "Other processes used 50%" in final.badge and "unreliable" in final.badge
    monkeypatch.setattr(race_tab.CpuShare, "others", lambda self: 0.02)
    quiet = list(race_tab.race(loader, Session(), form(max_new_tokens=4)))[-1]
    assert "unreliable" not in quiet.badge
    session_pool(loader.pair.target_name).clear()


def test_the_race_ends_with_the_whatif_for_other_hardware(tree_loader, pool):
    from specdec.teach.whatif import MACHINES, WITHIN
    final = list(race_tab.race(tree_loader, Session(), form(temperature=0.0, max_new_tokens=12, k=3)))[-1]
    assert final.whatif.startswith("<h3>What if this race's draft model ran on other hardware?</h3>")
    # a row per machine and this one, each at the race's K, and the sources of every machine's numbers
    heads = re.findall(r'<th scope="col">(.*?)</th>', final.whatif)
    assert heads == ["machine", "a verifier step t_v(1)", "c", "v(3)", "E(3) tokens a round", "S(3)", "the best K: S"]
    rows = re.findall(r'<th scope="row">(.*?)</th>', final.whatif)
    assert rows == [race_tab.HERE, *(html.escape(m.name) for m in MACHINES)]
    assert all(f"* **{m.name}**: {m.source}" in final.whatif_notes for m in MACHINES)
    # this machine predicted against the race for the draft model and the copying drafters, with the verdict
    said = re.findall(r"<li><b>(.+?)</b>: predicted <b>([\d.]+)x</b>.*?measured <b>([\d.]+)x</b>: (within|NOT within) "
                      rf"{WITHIN:.0%}", final.whatif)
    assert {label for label, *_ in said} == {html.escape(DRAFTERS[d].label) for d in ("model", "lookup", "suffix")}
    names = [t.name for t in final.whatif_chart.data]
    assert names == [race_tab.HERE, *(m.name for m in MACHINES), "this machine, measured in the race"]
    assert "**Would this pair pay on an Apple M2 Max?**" in final.whatif_notes
    assert "The study's own pair (DistilGPT-2, 6 layers, drafting for GPT-2 Medium, 24)" in final.whatif_notes
    empty = race_tab.race_view([], [], "", False)
    assert empty.whatif_chart is None and empty.whatif == empty.whatif_notes == ""

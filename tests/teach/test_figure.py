"""The round as a figure (specdec.teach.figure): real rounds of tiny random models, chains and trees, at every
phase, read back as XML. What a slide must say is checked in its text: every drafted token, the verdict
of each as a word (not only a colour), no u at temperature 0, the token that ends the round and where it
came from, and both caches' lengths."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from helpers import tiny

from specdec import (
    DecodeConfig,
    ModelChoice,
    RunSettings,
    SamplingConfig,
    round_figure,
    save_round_figure,
)
from specdec.decode.start import start
from specdec.teach.figure import visible
from specdec.teach.render import PHASES_OF_A_ROUND
from specdec.teach.style import FILL
from specdec.trace import ACCEPTED, BONUS, REJECTED, RESAMPLED, UNREACHED, UNTESTED

pytestmark = pytest.mark.usefixtures("one_thread")

SVG = "{http://www.w3.org/2000/svg}"
PROMPT = "w1 w2 w3 w4 w1 w2 w3"
VERDICTS = {ACCEPTED: "✓ kept", REJECTED: "✗ rejected", UNREACHED: "– not tested", UNTESTED: "– not tested"}


def settings(temperature: float, drafter: str = "model", **decode) -> RunSettings:
    return RunSettings(prompt=PROMPT, drafter=drafter, models=ModelChoice("tiny-target", "tiny-draft"),
                       decode=DecodeConfig(max_new_tokens=24, confidence=0.0, sampling=SamplingConfig(temperature),
                                           **{"k": 4, **decode}))


def rounds(pair, s: RunSettings, seed: int = 0) -> list:
    return start(pair, PROMPT, replace(s.decode, seed=seed), s.drafter).run().rounds


@pytest.fixture(scope="module")
def chain():
    """Rounds at T = 1 (a rejection after kept drafts; every draft kept) and at T = 0, with their settings."""
    pair = tiny.pair(tiny.model(1, scale=4), tiny.model(2, scale=4))
    sampled, greedy = settings(1.0), settings(0.0)
    hot, cold = rounds(pair, sampled), rounds(pair, greedy)
    rejected = next(r for r in hot if r.rejected_at is not None and r.rejected_at > 0)
    bonus = next(r for r in hot if r.next_kind == BONUS)
    return {"rejected": (rejected, sampled), "bonus": (bonus, sampled), "greedy": (cold[0], greedy)}


@pytest.fixture(scope="module")
def tree_round():
    """A tree round that kept a node and rejected one, at T = 1."""
    hf = tiny.model(0, scale=4)
    pair = tiny.pair(tiny.lean(hf), tiny.lean(tiny.noisy_copy(hf, 1, 0.3), batch_invariant=False))
    s = settings(1.0, "tree", tree_width=3, tree_nodes=10)
    for seed in range(20):
        for r in rounds(pair, s, seed):
            statuses = {n.status for n in r.tree.nodes}
            if {ACCEPTED, REJECTED} <= statuses:
                return r, s
    pytest.fail("no seed gave a tree round with a kept and a rejected node")


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("viewBox") == "0 0 1920 1080"
    return root


def texts(el: ET.Element) -> list[str]:
    return [t.text or "" for t in el.iter(f"{SVG}text")]


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == cls]


def cache_row(root: ET.Element, name: str) -> list[str]:
    """The three numbers after a cache's name: before the round, after the forwards, after the rollback."""
    shown = texts(root)
    i = shown.index(name)
    return shown[i + 1:i + 4]


def test_a_chain_round_shows_every_draft_its_numbers_and_its_verdict_in_words(chain):
    r, s = chain["rejected"]
    root = parse(round_figure(r, "accept", settings=s, context=PROMPT))
    rows = groups(root, "draft-row")
    assert len(rows) == len(r.positions)
    header = texts(root)[texts(root).index("#"):][:7]
    assert header == ["#", "token", "q(x)", "p(x)", "p/q", "u", "verdict"]
    for row, pos in zip(rows, r.positions):
        cells = texts(row)
        assert cells[1] == visible(pos.text)
        assert cells[-1].startswith(VERDICTS[pos.status]), (cells, pos.status)     # a word and a symbol, not colour
        assert row.get("data-status") == pos.status
        assert row.find(f"{SVG}rect").get("fill") == FILL[pos.status]
        if pos.tested:
            assert cells[2:6] == [f"{pos.q:.3g}", f"{pos.p:.3g}", f"{pos.ratio:.3g}", f"{pos.u:.3g}"]
        else:                                                  # never tested: no p, p/q or u, as the app shows it
            assert cells[3:6] == ["—", "—", "—"]
    end = groups(root, "round-end")
    assert len(end) == 1 and end[0].get("data-status") == RESAMPLED
    assert texts(end[0]) == [visible(r.next_token.text), "   ↻ resampled"]
    said = " ".join(texts(root))
    assert f"norm(max(0, p − q)) at position {r.rejected_at + 1}" in said
    assert "K = 4" in said and "temperature 1" in said and "tiny-target" in said and "drafter: draft model" in said


def test_temperature_zero_has_no_u_column_and_says_the_argmax(chain):
    r, s = chain["greedy"]
    for given in (s, None):  # from the settings, or from the round's own draws (none)
        root = parse(round_figure(r, "commit", settings=given))
        shown = texts(root)
        assert shown[shown.index("#"):][:6] == ["#", "token", "q(x)", "p(x)", "p/q", "verdict"]
        assert "u" not in shown
        cells = texts(groups(root, "draft-row")[r.rejected_at])
        assert cells[-1] == "✗ rejected: not the verifier's argmax"
        assert "The verifier's argmax at position" in " ".join(shown)


def test_a_bonus_round_says_the_bonus_came_from_row_k_plus_1_of_the_same_forward(chain):
    r, s = chain["bonus"]
    root = parse(round_figure(r, "commit", settings=s))
    assert all(texts(row)[-1] == "✓ kept (u ≤ p/q)" for row in groups(root, "draft-row"))
    assert texts(groups(root, "round-end")[0]) == [visible(r.next_token.text), "   ★ bonus"]
    assert f"row K + 1 = {r.drafted + 1} of the same verifier forward" in " ".join(texts(root))


def test_the_caches_before_and_after_as_far_as_the_phase_has_gone(chain):
    r, s = chain["rejected"]
    before = r.context_len - 1
    expected = {"draft": [str(before), "—", "—"], "verify": [str(before), str(r.target_cache[0]), "—"],
                "accept": [str(before), str(r.target_cache[0]), "—"],
                "commit": [str(before), str(r.target_cache[0]), str(r.target_cache[1])]}
    for phase in PHASES_OF_A_ROUND:
        root = parse(round_figure(r, phase, settings=s))
        assert cache_row(root, "verifier") == expected[phase], phase
        draft = cache_row(root, "draft")
        assert draft[1:] == [str(r.draft_cache[0]), str(r.draft_cache[1]) if phase == "commit" else "—"], phase
        # the round before is not given: only a first round knows what the draft's cache held before it
        assert draft[0] == (str(r.context_len - 1) if r.index == 0 else "—")


def test_a_phase_shows_only_what_it_has_revealed(chain):
    r, s = chain["rejected"]
    drafted = parse(round_figure(r, "draft", settings=s))
    shown = texts(drafted)
    assert "p(x)" not in shown and not any(v in t for t in shown for v in ("✓", "✗"))
    assert not groups(drafted, "round-end") and "Not decided yet" in " ".join(shown)
    verified = texts(parse(round_figure(r, "verify", settings=s)))
    assert "p(x)" in verified and "p/q" not in verified
    with pytest.raises(ValueError, match="phase must be one of"):
        round_figure(r, "rollback")


def test_the_first_round_knows_the_drafts_cache_and_a_later_one_takes_its_predecessors(chain):
    pair = tiny.pair(tiny.model(1, scale=4), tiny.model(2, scale=4))
    first, second, *_ = rounds(pair, chain["rejected"][1])
    assert cache_row(parse(round_figure(first)), "draft")[0] == str(first.context_len - 1)
    assert cache_row(parse(round_figure(second, previous=first)), "draft")[0] == str(first.draft_cache[1])


def test_a_tree_round_draws_every_node_with_its_verdict_and_the_kept_path(tree_round):
    r, s = tree_round
    root = parse(round_figure(r, "accept", settings=s))
    nodes = groups(root, "tree-node")
    assert len(nodes) == len(r.tree.nodes)
    for j, (g, n) in enumerate(zip(nodes, r.tree.nodes)):
        top, _, cue, *test = texts(g)
        assert top == f"{j} {visible(n.text)}"
        if n.status in (ACCEPTED, REJECTED):                   # its test, as the chain's table gives it
            assert len(test) == 1 and test[0].endswith(f" {n.ratio:.3g} · u {n.u:.3g}"), (j, test)
        else:
            assert test == []
        assert cue == ("root" if j == 0 else VERDICTS[n.status]), (j, n.status)
        assert g.get("data-status") == n.status
    thick = [p for p in root.iter(f"{SVG}path") if p.get("stroke-width") == "6"]
    assert len(thick) == len(r.tree.kept)                      # one thick edge into each node of the kept path
    end = groups(root, "round-end")
    assert [g.get("data-status") for g in end] == [r.next_kind] * 2   # the tree's last node and the panel's chip
    said = " ".join(texts(root))
    assert f"W = {r.tree.width}, N = {r.tree.budget}" in said
    assert cache_row(root, "verifier") == [str(r.context_len - 1), str(r.target_cache[0]), "—"]
    drafted = parse(round_figure(r, "draft", settings=s))
    assert all(texts(g)[2] == "○ drafted" for g in groups(drafted, "tree-node")[1:])


def test_a_tree_round_says_what_happened_and_tests_a_sibling_against_the_residual(tree_round):
    r, s = tree_round
    root = parse(round_figure(r, "accept", settings=s))
    said = " ".join(texts(root))
    assert "What happened" in said and "the next sibling is tested against what is left" in said
    nodes, tests = r.tree.nodes, {}
    for g, n in zip(groups(root, "tree-node"), nodes):
        if len(texts(g)) == 4:
            tests.setdefault(n.parent, []).append((texts(g)[3], n.status))
            if texts(g)[3].startswith("r/q′ "):  # the box shows what the ratio divides: its p and q do not give it
                num, den = map(float, re.fullmatch(r"r (\S+) · q′ (\S+)", texts(g)[1]).groups())
                assert num / den == pytest.approx(n.ratio, rel=5e-3) and den > n.q  # to the shown 3 digits
    # the first child tested is tested against p; a child after a rejected sibling against the residual r
    for siblings in tests.values():
        assert siblings[0][0].startswith("p/q ")
        assert all(t.startswith("r/q′ ") for t, _ in siblings[1:]), siblings
    assert any(len(v) > 1 for v in tests.values())
    greedy = replace(r, tree=replace(r.tree, nodes=tuple(replace(n, u=None) for n in nodes)))
    cold = parse(round_figure(greedy, "accept", settings=replace(s, decode=replace(
        s.decode, sampling=SamplingConfig(0.0)))))
    shown = [texts(g) for g in groups(cold, "tree-node")]
    assert any(len(t) == 4 for t in shown) and not any("· u" in t[-1] for t in shown)  # no u at temperature 0


def test_a_tree_that_ran_as_a_chain_says_so():
    hf = tiny.model(0, scale=4)
    pair = tiny.pair(tiny.lean(hf), tiny.lean(tiny.noisy_copy(hf, 1, 0.3), batch_invariant=False))
    s = settings(1.0, "tree", tree_width=1, tree_nodes=4)
    r = rounds(pair, s)[0]
    assert r.tree is None                                                   # width 1: the chain drafter drafted it
    said = " ".join(texts(parse(round_figure(r, settings=s))))
    assert "drafter: model, as a token tree (ran as a chain: W = 1)" in said


def test_the_subtitle_says_what_stopped_drafting_and_the_sampling_settings(chain):
    r, s = chain["rejected"]
    s = replace(s, decode=replace(s.decode, k=6, confidence=0.6, seed=7,
                                  sampling=SamplingConfig(1.0, top_k=20, top_p=0.9)))
    stopped = replace(r, draft_stop="confidence")
    said = " ".join(texts(parse(round_figure(stopped, settings=s))))
    for words in (f"draft confidence 0.6: stopped after {len(r.positions)} of 6", "top-k 20", "top-p 0.9", "seed 7"):
        assert words in said, words
    said = " ".join(texts(parse(round_figure(r, settings=s))))     # the threshold did not stop it
    assert "draft confidence 0.6" in said and "stopped after" not in said


def test_a_few_drafts_fill_the_slide(chain):
    r, s = chain["rejected"]
    one = replace(r, positions=r.positions[:1])
    root = parse(round_figure(one, "draft", settings=s))
    row = groups(root, "draft-row")[0].find(f"{SVG}rect")
    assert float(row.get("height")) >= 100                          # a taller row than a full table's
    heading = next(t for t in root.iter(f"{SVG}text") if t.text == "What happened")
    lines = [t for t in root.iter(f"{SVG}text") if float(t.get("y")) > float(heading.get("y"))
             and float(t.get("x")) == float(heading.get("x")) and float(t.get("y")) < 800]
    assert float(heading.get("x")) == 60 and len(lines) >= 2        # the story under the table, across the slide


def test_any_token_text_makes_a_valid_svg_with_its_whitespace_visible(chain, tmp_path):
    r, s = chain["rejected"]
    odd = ("<a & 'b'>", "  \tx\n", "\x00\x1b\r", "\ud800 end")
    positions = tuple(replace(p, text=t) for p, t in zip(r.positions, odd))
    r = replace(r, positions=positions)
    root = parse(round_figure(r, "accept", settings=s, context="def f():\n\treturn 1 < 2 & 3"))
    assert [texts(g)[1] for g in groups(root, "draft-row")] == ["<a·&·'b'>", "··→x↵", "␀␛␍", "\ufffd·end"]
    shown = texts(root)
    assert shown[shown.index("Context (its end):") + 1] == "def·f():↵→return·1·<·2·&·3"
    assert texts(parse(round_figure(r, title="a\x00b\ud800")))[0] == "a\ufffdb\ufffd"
    path = save_round_figure(r, tmp_path / "round.svg", "accept", settings=s)
    assert parse(path.read_text(encoding="utf-8")) is not None
    with pytest.raises(ValueError, match=r"\.svg"):
        save_round_figure(r, tmp_path / "round.png")


def test_text_on_the_slide_is_large_enough_to_read_projected(chain, tree_round):
    for r, s in (chain["rejected"], tree_round):
        root = parse(round_figure(r, "commit", settings=s))
        drawn = {t: 1.0 for t in root.iter(f"{SVG}text")}   # each text's size as drawn, a scaled group's scale applied
        for g in root.iter(f"{SVG}g"):
            if "scale(" in (g.get("transform") or ""):
                drawn.update({t: float(g.get("transform").split("scale(")[1].rstrip(")")) for t in g.iter(f"{SVG}text")})
        sizes = [float(t.get("font-size")) * scale for t, scale in drawn.items()]
        assert min(sizes) >= 22 and max(sizes) >= 40, (r.tree is not None, min(sizes))


def test_the_step_through_offers_the_round_on_show_at_its_phase_and_nothing_before_a_round():
    from specdec_ui import figure_views
    from specdec_ui.state import Loader, Session, form_defaults
    from specdec_ui.tabs import step as step_tab
    pair = tiny.pair(tiny.model(1, scale=4), tiny.model(2, scale=4))
    loader, session = Loader(ModelChoice.of(pair), pair), Session()
    form = {**form_defaults(), "prompt": PROMPT, "k": 4, "confidence": 0.0, "temperature": 1.0, "max_new_tokens": 16}
    note, svg_b, png_b, preview = figure_views.update(loader, session)
    assert note == figure_views.NOTHING and not svg_b["interactive"] and not png_b["interactive"] and preview == ""
    for action, phase, n in (("draft", "Draft", 1), ("verify", "Verify", 1), ("commit", "Commit and roll back", 1),
                             ("step", "Commit and roll back", 2)):
        list(step_tab.step(loader, action, session, form))
        note, svg_b, png_b, preview = figure_views.update(loader, session)
        assert svg_b["interactive"] and png_b["interactive"]
        shown = texts(parse(preview))
        assert shown[0] == f"Speculative decoding, round {n}: after {phase}"
        context = shown[shown.index("Context (its end):") + 1]
        r = session.walk.shown
        assert context.endswith(visible(pair.decode(session.gen.prompt_ids + session.gen.token_ids[:r.context_len - len(
            session.gen.prompt_ids)])[-20:]))                       # the context ends where the round begins
    list(step_tab.step(loader, "reset", session, form))
    assert figure_views.update(loader, session)[0] == figure_views.NOTHING

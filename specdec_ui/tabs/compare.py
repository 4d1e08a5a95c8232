"""The Compare tab: verifier only against speculative decoding on the same settings, raced round for round
in turn, repeated over seeds; with the tree drafter, against a chain and a tree. The outputs side by side
token for token, the speed-up with its spread, and why: the measured costs in the theory's words.

The runs of a group advance in turn, always the one behind in its own elapsed time, so that each
meets the same state of the machine (:class:`~specdec_ui.state.Worker`); at a temperature above 0
both generate exactly max-new-tokens tokens, equal work, so that their times per token compare.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from html import escape
from typing import Any, Iterator

import gradio as gr

from specdec import ConfigError
from specdec.decode import registry
from specdec.decode.start import start
from specdec.teach import tokenkind
from specdec.teach.theory import acceptance, decode_tokens_per_s
from specdec.teach.tokenkind import acceptance_by_kind
from specdec.trace import RoundTrace, RunStop, summarize
from specdec_ui import charts
from specdec_ui.charts import CHAIN, SPECULATIVE, TREE, VERIFIER_ONLY
from specdec_ui.kinds import kinds_chart, kinds_markdown
from specdec_ui.markup import plain_html, whitespace_html
from specdec_ui.state import (
    FIELD_LABELS,
    FORM,
    HINTS,
    Loader,
    Session,
    Worker,
    parse_runs,
)
from specdec_ui.views import (
    UNCHANGED,
    WAITING,
    Problem,
    follow,
    problem,
    read_settings,
    stop,
)
from specdec_ui.wiring import (
    AS_EDITED,
    PLOT_MIN_WIDTH,
    SHOW_FIELD_ERROR,
    Page,
    checked,
    view_outputs,
)

STOPPED_COMPARE = ("**Stopped.** The figures below are of the rounds each side ran before the stop: partial runs, "
                   "not a comparison (no speed-up is given). Press **Run both** for a whole one.")
COLUMN_MIN_WIDTH = 280  # three columns side by side beside the open sidebar at 1280 px


@dataclass(frozen=True, kw_only=True)
class CompareView:
    """Verifier only against speculative decoding; with the tree drafter, against a chain (the draft
    model, same K and settings) and against the tree, in a third column."""

    verdict: str          # HTML: identical, differing or sampled outputs, as a badge; "" until the runs end
    badge: str            # the speed-up and what it means, or the comparison's progress
    spec_title: str       # the second column's heading: "Speculative", or "Chain" beside a tree
    tree_side: bool       # the third column, the tree's, is shown
    base_stats: str
    spec_stats: str
    tree_stats: str
    aligned: str          # HTML: the outputs token for token, the first difference marked
    base_text: str        # HTML: each output as plain text, to copy
    spec_text: str
    tree_text: str        # "" without a tree
    live: str             # HTML: the race while it goes; "" once the interactive chart is drawn
    race: Any
    why: str
    why_chart: Any
    kinds: Any            # a = kept / tested per kind of token, over every speculative run
    kinds_text: str


# ---- the view ------------------------------------------------------------------------------------

def distinct_runs(runs: list[list[RoundTrace]]) -> list[list[RoundTrace]]:
    """The runs that drafted and tested different tokens: identical runs (every seed at T = 0) once."""
    seen, out = set(), []
    for rounds in runs:
        key = tuple((pos.token_id, pos.status) for r in rounds for pos in r.positions)
        if key not in seen:
            seen.add(key)
            out.append(rounds)
    return out


def _median_range(xs: list[float], fmt: str, unit: str) -> str:
    """One measurement, or the median of several with their range: the spread is part of the figure."""
    if len(xs) == 1:
        return f"**{format(xs[0], fmt)}{unit}**"
    return (f"**{format(statistics.median(xs), fmt)}{unit}** (median of {len(xs)} runs; range "
            f"{format(min(xs), fmt)}–{format(max(xs), fmt)}{unit})")


def _side_stats(gens: list, spec: bool) -> str:
    """One side of the comparison: its decode speed over the runs so far, the latest run's figures, then
    a over every run so far: the one acceptance figure of the tab, the a of Why."""
    done = [g for g in gens if g.rounds]
    if not done:
        return ""
    g = done[-1]
    s = g.summary()
    speeds = [decode_tokens_per_s(x.rounds) for x in done]
    lines = [f"{_median_range(speeds, '.2f', ' tok/s')} decoding = tokens / the rounds' compute (the prefill "
             "excluded)",
             f"latest run: {s.new_tokens} tokens in {s.wall_s - s.prefill_s:.2f} s of rounds, prefill "
             f"{s.prefill_s:.2f} s, **{s.target_forwards} verifier passes** (one per round + the prefill)"]
    rounds = [r for x in done for r in x.rounds]
    every = summarize(rounds)
    tested = sum(r.tested for r in rounds)
    over = f" over the {len(done)} runs" if len(done) > 1 else ""
    if spec and every.drafted and rounds[-1].tree is not None:
        lines.append(f"**a = {acceptance(rounds):.2f}** = steps down the tree kept / tried = {every.accepted} / "
                     f"{tested}{over} (one try per depth the walk reaches); {every.drafted / every.rounds:.1f} nodes "
                     f"drafted per round, {every.mean_tokens_per_round:.2f} tokens per round")
    elif spec and every.drafted:
        lines.append(f"**a = {acceptance(rounds):.2f}** = drafts kept / tested = {every.accepted} / {tested}{over} (a "
                     f"draft after a rejection is never tested); {every.mean_tokens_per_round:.2f} tokens per round")
    return "\n".join(f"* {line}" for line in lines)


# Words that are code (in a code fence, inline code or a line of code) against words of prose: the kind
# of text, as the drafted tokens' classes tell it (specdec.teach.tokenkind).
CODE_WORDS, PROSE_WORDS = (tokenkind.KEYWORD, tokenkind.IDENTIFIER), (tokenkind.WORD,)


def _text_kind(runs: list[list[RoundTrace]]) -> str:
    """Whether code or prose drafted better in these runs, with the counts; "" unless each had enough
    tested words and their gap is beyond what sampling alone often gives."""
    counts = acceptance_by_kind(*runs)
    code, prose = (tokenkind.KindCount(kinds[0], sum(c.kept for c in counts if c.kind in kinds),
                                       sum(c.tested for c in counts if c.kind in kinds))
                   for kinds in (CODE_WORDS, PROSE_WORDS))
    if min(code.tested, prose.tested) < tokenkind.MIN_TESTED:
        return ""
    if abs(code.rate - prose.rate) <= tokenkind.sampling_gap(code, prose):
        return ""
    better = "Code" if code.rate > prose.rate else "Prose"
    return (f" {better} drafted better than {'prose' if better == 'Code' else 'code'} in this text: words of code "
            f"(keywords and identifiers) kept {code.rate:.0%} ({code.kept} of {code.tested}), words of prose "
            f"{prose.rate:.0%} ({prose.kept} of {prose.tested}), a gap beyond sampling noise (the kinds of token, "
            "below).")


def _noise_clause(a: float, noise: float) -> str:
    """What draft noise e did to a. Each test keeps at least (1 - e) times as often as without it
    (min(p, (1 - e) q + e/V) >= (1 - e) min(p, q)), so the draft alone would keep at most about a / (1 - e)."""
    if not noise:
        return ""
    said = (f" **Draft noise e = {noise:.2f}** was on and drove the figure down: the draft sampled from "
            f"(1 − e)·q + e/V, so about {noise:.0%} of its drafts were a token drawn uniformly from the whole "
            "vocabulary, which the verifier all but never keeps")
    if noise < 1:
        said += (f"; each test keeps at least (1 − e) times as often as without the noise, so without it a (below) "
                 f"would be at most about a / (1 − e) = {min(1.0, a / (1 - noise)):.2f}")
    return said + ". Set Draft noise to 0 for the draft as it is."


def why_markdown(m, rounds: list[RoundTrace], noise: float = 0.0, text_kind: str = "", who: str = "",
                 runs: int = 1) -> str:
    """What made the measured speed-up, from the numbers on show: tokens per round against the round's
    cost in verifier-only steps (their ratio is the figure), draft noise when it was on, the kind of
    text when the counts tell code from prose; then the measured costs in the words of the theory
    chart next to it. ``rounds``: the speculative side's rounds over every run, those ``m`` measured; over
    ``runs`` > 1 the figure is theirs pooled, which the text tells from the badge's median run."""
    best, k = m.best_k(32), max(1, round(m.k_mean))
    per_round = sum(len(r.emitted) for r in rounds) / len(rounds)
    cost, drafting = (sum(f(r) for r in rounds) / len(rounds) / m.t1 for f in (lambda r: r.times.total,
                                                                                 lambda r: r.times.draft))
    pooled = (f" (the {runs} runs' rounds together; the badge gives the median run's, so the two can differ)"
              if runs > 1 else "")
    return (f"**Why {m.measured:.2f}x{who}?**{pooled} A speculative round gave **{per_round:.2f} tokens** (the drafts kept, "
            f"plus one from the verifier) and took as long as **{cost:.2f} verifier-only steps** ({drafting:.2f} "
            f"drafting, {cost - drafting:.2f} verifying and deciding): {per_round:.2f} / {cost:.2f} = "
            f"{m.measured:.2f}x.{_noise_clause(m.a, noise)}{text_kind} Measured here: a drafted token costs "
            f"**c = {m.c:.2f}** of a verifier-only step ({1e3 * m.draft_per_token:.0f} ms against {1e3 * m.t1:.0f} ms); "
            f"a verification of K+1 positions, with the accept/reject and rollback around it, costs **v(K) = "
            f"{m.v(k):.2f}** steps at the K drafted (the line {1e3 * m.verify_fixed:.0f} + {1e3 * m.verify_per_row:.1f}"
            f"·(K+1) ms, fitted to every round's time outside drafting); **a = {m.a:.2f}** "
            f"(the column's a, kept / tested), with **K = {m.k_mean:.1f}** drafted per round on average. The theory "
            f"S(K) = (1 − a^(K+1)) / ((1 − a)(K·c + v(K))), which takes every draft as kept independently with "
            f"probability a, predicts **{m.speedup(k):.2f}x** at K = {k} and is best "
            f"at **K = {best}** ({m.speedup(best):.2f}x). A cheaper draft (smaller c) or a more faithful one (larger "
            "a) moves the whole curve up.")


def tree_why_markdown(chain: list[RoundTrace], tree: list[RoundTrace]) -> str:
    """The tree against the chain, per round: what each drafted, what its rounds cost, what they kept."""
    if not chain or not tree:
        return ""
    def per(rounds, f) -> float:
        return sum(f(r) for r in rounds) / len(rounds)
    drafting, rest = (lambda r: 1e3 * r.times.draft), (lambda r: 1e3 * (r.times.total - r.times.draft))
    tokens, t = (lambda r: len(r.emitted)), tree[-1].tree
    return (f"**The tree against the chain, per round:** it drafted **{per(tree, lambda r: r.drafted):.1f} nodes** "
            f"(W = {t.width}, N = {t.budget}, depth at most K) against the chain's {per(chain, lambda r: r.drafted):.1f} "
            f"tokens, in {per(tree, drafting):.0f} ms of drafting against {per(chain, drafting):.0f} ms; the rest of "
            f"its round, mostly the verifier's forward over N + 1 rows, took {per(tree, rest):.0f} ms against the "
            f"chain's {per(chain, rest):.0f} ms over K + 1; and it kept **{per(tree, tokens):.2f} tokens** against the "
            f"chain's {per(chain, tokens):.2f}. A tree pays more per round to keep more per round: it gains where the "
            "extra tokens outweigh the extra cost.")


# The Compare tab's verdict: each kind a colour *and* an icon and words. ≈ for sampling: the outputs
# are equal in distribution, not in text.
IDENTICAL, DIFFER, BY_DESIGN = "identical", "differ", "by-design"
VERDICT_ICONS = {IDENTICAL: "✓", DIFFER: "≠", BY_DESIGN: "≈"}


def verdict_html(kind: str, headline: str, detail: str) -> str:
    """The comparison's outcome as a badge, announced to screen readers (role=status)."""
    return (f'<div class="cmp-verdict cmp-{kind}" role="status"><span class="cmp-verdict-icon" aria-hidden="true">'
            f'{VERDICT_ICONS[kind]}</span><span><strong>{escape(headline)}</strong><span class="cmp-verdict-detail">'
            f'{escape(detail, quote=False)}</span></span></div>')


def _verdict(complete: list[dict], specs: list[str], greedy: bool, differences: dict | None) -> str:
    """Identical, differing (where and why) or sampled: the runs of every complete group against verifier only."""
    from specdec.teach.render import first_difference
    tree, base = TREE in specs, next(iter(complete[0]))
    if not greedy:
        return verdict_html(BY_DESIGN, "Sampling: outputs differ by design",
                            "At temperature > 0 each run is a sample from the verifier's p, so their texts differ; for "
                            f"equal work {'all three' if tree else 'both'} runs of a pair generate exactly "
                            "max-new-tokens tokens (a stop token does not end them).")
    differ = {}
    for n in specs:
        d = next((d for d in (first_difference(p[base].token_ids, p[n].token_ids) for p in complete) if d is not None),
                 None)
        if d is not None:
            differ[n] = d
    if not differ:
        n = len(complete[-1][base].token_ids)
        each = f" in each of the {len(complete)} runs" if len(complete) > 1 else ""
        return verdict_html(IDENTICAL, f"Identical output: {n} of {n} tokens",
                            ("The chain and the tree each" if tree else "Speculative decoding") +
                            f" reproduced the verifier's greedy tokens exactly{each}.")
    why = (f"At temperature 0 this happens at a tie or near-tie of the verifier's top logits, where a forward over "
           f"{'several' if tree else 'K+1'} positions and a single-token one can round differently and pick different "
           "argmaxes.")
    if differences:  # the measured gap replaces the general explanation
        why = " ".join(f"{'The ' + n + ': t' if tree else 'T'}{d.sentence()[1:]}." for n, d in differences.items())
    headline = ("Outputs differ: " + ", ".join(f"the {n}'s from token {d + 1}" for n, d in differ.items()) if tree else
                f"Outputs differ from token {differ[specs[0]] + 1}")
    return verdict_html(DIFFER, headline, why)


def _tokens(g) -> list[tuple[int, str]]:
    """A run's output as (id, text) per token, the texts joining to its text."""
    return list(zip(g.token_ids, (piece for r in g.rounds for piece in r.pieces)))


def aligned_html(sides: dict[str, list[tuple[int, str]]], settled: bool) -> str:
    """The outputs token for token (ids compared, texts shown), the first side's first. The tokens every
    side shares from the start are one text; from the first that is not shared, each position is a
    column with one token per side, one under another, wrapping like text: a token unlike the first
    side's is marked, and the first position where the sides differ carries its number. While the runs
    go (``settled`` False) a side that has not reached a position yet differs from none there."""
    names, runs = list(sides), list(sides.values())
    width = max(map(len, runs))
    if not width:
        return ""
    ids = [[t for t, _ in run] for run in runs]
    shared = next((i for i in range(width) if len({x[i] if i < len(x) else None for x in ids}) > 1), width)
    sides_words = "both outputs" if len(runs) == 2 else f"all {len(runs)} outputs"
    text = "".join(piece for _, piece in runs[0][:shared])
    same = (f'<div class="cmp-same" aria-label="tokens 1 to {shared}, the same in {sides_words}">{whitespace_html(text)}'
            "</div>" if shared else "")
    if shared == width:
        return (f'<div class="cmp-aligned"><p class="cmp-al-key">The same {width} tokens in {sides_words}, shown '
                f"once:</p>{same}</div>")

    def at(run, i):
        return run[i] if i < len(run) else None

    def differs(i: int) -> bool:
        here = [t for t in (at(x, i) for x in ids) if settled or t is not None]
        return len(set(here)) > 1
    first = next((i for i in range(shared, width) if differs(i)), None)
    cols = ['<span class="al-col al-key" aria-hidden="true">' +
            "".join(f'<span class="al-cell al-r{j}">{escape(n)}</span>' for j, n in enumerate(names)) + "</span>"]
    for i in range(shared, width):
        tokens = [at(run, i) for run in runs]
        said = "; ".join(f"{n} {'no token' if t is None else repr(t[1])}" for n, t in zip(names, tokens))
        cells = []
        for j, t in enumerate(tokens):
            unlike = j > 0 and t is not None and (t[0] != tokens[0][0] if tokens[0] is not None else settled)
            kind = " al-none" if t is None else " al-diff" if unlike else ""
            body = "" if t is None else whitespace_html(t[1]).replace("\n", "")  # the line break: after the column
            cells.append(f'<span class="al-cell al-r{j}{kind}">{body}</span>')
        mark = f' class="al-col al-first" data-n="{i + 1}"' if i == first else ' class="al-col"'
        cols.append(f'<span{mark} title="{escape(f"token {i + 1}: {said}", quote=True)}">' + "".join(cells)
                    + "</span>")
        if any(t is not None and "\n" in t[1] for t in tokens):
            cols.append('<span class="al-br"></span>')
    rows = ("the verifier-only token above the speculative one" if len(runs) == 2 else
            f"one token per output, from the top: {', '.join(names)}")
    start = (f"Tokens 1–{shared} are the same in {sides_words} (shown once); from token {shared + 1}"
             if shared else "From the first token")
    found = (f" The first difference, token {first + 1}, is marked ▼." if first is not None else
             " No difference yet: one run is ahead.")
    return (f'<div class="cmp-aligned"><p class="cmp-al-key">{start} each position shows {escape(rows)}; a token '
            f"unlike the verifier-only one is underlined in red.{found}</p>{same}"
            f'<div class="cmp-grid">{"".join(cols)}</div></div>')


def _copy_html(title: str, text: str) -> str:
    """One output as plain text under its name, to copy."""
    return f'<p class="cmp-copy-title">{escape(title)}</p>{plain_html(text)}'


def compare_view(pairs: list[dict], settings, finished: bool, final: bool = False,
                 differences: dict | None = None) -> CompareView:
    """Every side over every group of runs so far (verifier only first, then the speculative
    runs), and the texts of the latest group, token for token. While the runs go (``final`` False)
    the race is drawn in HTML; at the end, the interactive chart and why. ``differences``: per
    speculative side, where its greedy output parted from verifier-only, explained
    (:class:`specdec.teach.exactness.Difference`)."""
    from specdec.teach.theory import cost_model
    base, *specs = list(pairs[0])
    tree, chain = TREE in specs, specs[0]
    started = [p for p in pairs if any(g.rounds for g in p.values())] or pairs[:1]
    latest = started[-1]
    complete = [p for p in pairs if all(g.done for g in p.values())]
    badge, verdict = "Running..." if not finished else "", ""
    if finished and complete:
        ups = {n: [decode_tokens_per_s(p[n].rounds) / decode_tokens_per_s(p[base].rounds)
                   for p in complete if p[base].rounds and p[n].rounds] for n in specs}
        if tree:
            badge = (f"**Speed-up** chain {_median_range(ups[CHAIN], '.2f', 'x')}, tree "
                     f"{_median_range(ups[TREE], '.2f', 'x')} = the verifier-only run's time per token / each "
                     "speculative run's, over the rounds (each run's own compute; the prefill excluded).")
        else:
            badge = (f"**Speed-up** {_median_range(ups[chain], '.2f', 'x')} = the verifier-only run's time per token / "
                     "the speculative run's, over the rounds (each run's own compute; the prefill excluded).")
        verdict = _verdict(complete, specs, settings.decode.sampling.greedy, differences)
        if len(ups[chain]) == 1:
            badge += " One run: set Runs to 3 to see how much the figure moves from run to run."
    why, why_chart, race, kinds, kinds_text = "", None, None, None, ""
    if final:
        side = lambda n: [r for p in started for r in p[n].rounds]  # noqa: E731
        model = cost_model(side(base), side(chain))
        runs = {n: distinct_runs([p[n].rounds for p in started]) for n in specs}
        if model is not None and finished:
            why = why_markdown(model, side(chain), settings.decode.draft_noise, _text_kind(runs[chain]),
                               " for the chain" if tree else "", runs=len(started))
            why_chart = charts.speedup_figure(model, settings.decode.k)
            if tree:
                why += "\n\n" + tree_why_markdown(side(chain), side(TREE))
        if any(r.positions for n in specs for r in side(n)):  # every speculative run, one bar per side
            kinds, kinds_text = kinds_chart(runs), kinds_markdown(runs)
            copies = len(started) - min(len(r) for r in runs.values())
            if copies:  # at T = 0 every seed drafts and tests the same tokens: counting them twice is no evidence
                kinds_text = (f"*Over {min(len(r) for r in runs.values())} distinct run(s): {copies} run(s) drafted and "
                              "tested exactly the same tokens as another (greedy, T = 0) and are counted once.*\n\n"
                              + kinds_text)
        race = charts.race_figure([(f"{name}{f' (run {i + 1})' if len(pairs) > 1 else ''}", name, p[name].rounds)
                                   for i, p in enumerate(started) for name in p])
    stats = {n: _side_stats([p[n] for p in pairs], n != base) for n in pairs[0]}
    spec_title = "Chain (draft model)" if tree else "Speculative"
    return CompareView(verdict=verdict, badge=badge, spec_title=f"### {spec_title}", tree_side=tree,
                       base_stats=stats[base], spec_stats=stats[chain], tree_stats=stats.get(TREE, ""),
                       aligned=aligned_html({n: _tokens(g) for n, g in latest.items()},
                                            all(g.done for g in latest.values())),
                       base_text=_copy_html("Verifier only", latest[base].text),
                       spec_text=_copy_html(spec_title, latest[chain].text),
                       tree_text=_copy_html("Tree (draft model)", latest[TREE].text) if tree else "",
                       live="" if final else charts.race_html([(n, g.rounds) for n, g in latest.items()]),
                       race=race if final else UNCHANGED, why=why if final else UNCHANGED,
                       why_chart=why_chart if final else UNCHANGED, kinds=kinds if final else UNCHANGED,
                       kinds_text=kinds_text if final else UNCHANGED)


# ---- the button ---------------------------------------------------------------------------------

def _differences(pair, pairs: list[dict]) -> dict:
    """Per speculative side, the first pair of greedy runs whose output differs from verifier-only,
    explained (:func:`specdec.teach.exactness.explain`: a near-tie or a bug)."""
    from specdec.teach.exactness import explain
    base, *specs = list(pairs[0])
    out = {}
    for n in specs:
        for p in pairs:
            d = explain(pair, p[base].prompt_ids, p[base].token_ids, p[n].token_ids)
            if d is not None:
                out[n] = d
                break
    return out


def compare(loader: Loader, session: Session, form: dict, runs=1) -> Iterator[CompareView | Problem]:
    """``runs`` pairs of runs (seeds seed, seed + 1, ...), each pair advancing in turn, always the
    run that is behind in its own elapsed time, so both see the same state of the machine. At a
    temperature above 0 both runs of a pair generate exactly max-new-tokens tokens (a stop token
    does not end them): equal work, so that their times per token compare like for like. With the
    tree drafter each group races three runs: verifier only, a chain (the draft model, the same K
    and settings) and the tree."""
    settings = read_settings(loader, form, session)
    if isinstance(settings, Problem):
        yield settings
        return
    try:
        n_runs = parse_runs(runs)
        greedy = settings.decode.sampling.greedy
        sides = (((VERIFIER_ONLY, registry.VERIFIER_ONLY.name), (CHAIN, registry.MODEL.name), (TREE, registry.TREE.name))
                 if settings.drafter == registry.TREE.name else
                 ((VERIFIER_ONLY, registry.VERIFIER_ONLY.name), (SPECULATIVE, settings.drafter)))
        pairs = []
        for i in range(n_runs):
            cfg = replace(settings.decode, seed=settings.decode.seed + i, ignore_eos=not greedy)
            pairs.append({name: start(loader.pair, settings.prompt, cfg, drafter)
                          for name, drafter in sides})
    except ConfigError as e:
        yield problem(e, {**form, "runs": runs})
        return
    gens = [g for p in pairs for g in p.values()]
    session.stop, session.running = False, gens

    def view(waiting: bool, finished: bool = False) -> CompareView:
        v = compare_view(pairs, settings, finished)
        return replace(v, badge=WAITING) if waiting else v
    yield view(False)
    worker = Worker([list(p.values()) for p in pairs], stopped=lambda: session.stop)
    yield from follow(worker, view, gens)
    session.running = []
    if worker.error is not None:
        yield problem(worker.error)
        return
    stopped = session.stop or any(g.stop_reason == RunStop.CANCELLED for g in gens)
    differences = {} if stopped or not greedy else _differences(loader.pair, pairs)
    final = compare_view(pairs, settings, not stopped, final=True, differences=differences)
    yield replace(final, badge=STOPPED_COMPARE) if stopped else final


# ---- the tab ----------------------------------------------------------------------------------

def build(page: Page, tab_id: str) -> None:
    """The tab, inside ``gr.Tabs``: a column per side, then the outputs token for token, the race and why."""
    loader, session, form = page.loader, page.session, page.form
    with gr.Tab("Compare", id=tab_id):
        about = gr.State(None)
        with gr.Row():  # at 400 px the buttons share a line under the field, each wide enough for its label
            runs = gr.Number(1, label=FIELD_LABELS["runs"], info=HINTS["runs"], min_width=200)
            compare_b = gr.Button("Run both", variant="primary", min_width=130)
            stop_b = gr.Button("Stop comparison", variant="stop", min_width=130)
        alert = gr.Markdown(elem_classes=["spec-alert"])
        view = {"verdict": gr.HTML(),
                "badge": gr.Markdown("Runs verifier-only and speculative decoding on the same settings, round for "
                                     "round in turn (with the tree drafter: verifier only, a chain and the tree).")}
        with gr.Row():
            with gr.Column(min_width=COLUMN_MIN_WIDTH):
                gr.Markdown("### Verifier only")
                view["base_stats"] = gr.Markdown()
            with gr.Column(min_width=COLUMN_MIN_WIDTH):
                view["spec_title"] = gr.Markdown("### Speculative")
                view["spec_stats"] = gr.Markdown()
            with gr.Column(min_width=COLUMN_MIN_WIDTH, visible=False) as view["tree_side"]:
                gr.Markdown("### Tree (draft model)")
                view["tree_stats"] = gr.Markdown()
        view["aligned"] = gr.HTML(elem_id="aligned-outputs")
        with gr.Accordion("Each output as plain text, to copy", open=False):
            view["base_text"] = gr.HTML(elem_id="verifier-only-text")
            view["spec_text"] = gr.HTML(elem_id="speculative-text")
            view["tree_text"] = gr.HTML(elem_id="tree-text")
        view["live"] = gr.HTML()
        view["race"] = gr.Plot(visible=False, show_label=False)
        with gr.Row():
            view["why"] = gr.Markdown()
            view["why_chart"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["kinds"] = gr.Plot(visible=False, show_label=False)
        view["kinds_text"] = gr.Markdown()
    fields_ = {**form, "runs": runs}
    outputs, show = view_outputs(CompareView, view, fields_, alert, page.sidebar, loader=loader, about=about)

    def listener(session_, *values):
        *form_values, n = values
        for i, result in enumerate(compare(loader, session_, dict(zip(FORM, form_values)), n)):
            yield show(result, first=i == 0)
    compare_b.click(listener, [session, *form.values(), runs], outputs).then(None, None, None, js=SHOW_FIELD_ERROR)
    runs.change(lambda value: checked(loader, "runs", value), runs, runs, **AS_EDITED)
    stop_b.click(stop, session, view["badge"])
    page.needs_models.append(compare_b)

"""Trace to display: plain data the app (and a notebook) shows for :class:`~specdec.trace.RoundTrace` records.

Pure functions of the records: no model, no gradio, no plotly. Letters as in Leviathan et al.
2023: p is the verifier (target), q the draft. The acceptance estimate ``a`` for the theory curve
(:mod:`specdec.teach.theory`) is the share of *tested* drafted positions that were kept; positions
after a rejection were never tested and do not count, and show no verdict numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

from specdec.decode.registry import LOOKUP, MODEL
from specdec.teach.theory import running_acceptance
from specdec.teach.tokenkind import KIND_NAMES, token_kind
from specdec.trace import (
    ACCEPTED,
    AFTER_STOP,
    BONUS,
    PLAIN,
    REJECTED,
    RESAMPLED,
    UNREACHED,
    DraftedBy,
    DraftPlan,
    DraftStop,
    NextKind,
    RoundTrace,
    Status,
)

TOKEN_KINDS = (ACCEPTED, REJECTED, RESAMPLED, BONUS, PLAIN)  # every kind of token in the colour-coded text
# the timed phases of a round (trace.PHASES), as the charts and the summary name them
PHASE_NAMES = {"draft": "drafting", "verify": "verifier forward", "accept": "accept/reject",
               "rollback": "cache rollback", "other": "other"}


@dataclass(frozen=True)
class Segment:
    """A span of the colour-coded text: one token, where it came from and its numbers."""

    text: str
    label: str                 # ACCEPTED | REJECTED (a Status) or RESAMPLED | BONUS | PLAIN (a NextKind)
    round: int
    position: int              # index within the round (K = the token after the drafts)
    p: float | None = None     # verifier probability (of the drafted token, or of the drawn one)
    q: float | None = None     # draft probability; None for resampled / bonus tokens
    kind: str = ""             # what the token is (specdec.teach.tokenkind), read after the text before it

    @property
    def ratio(self) -> float | None:
        return None if self.q is None or self.p is None else self.p / self.q


def segments(rounds: list[RoundTrace]) -> list[Segment]:
    """Every emitted token in order, plus each rejected draft where it was replaced.
    The texts of all segments but the rejected ones join to exactly the generated text. Each is
    classed (:func:`specdec.teach.tokenkind.token_kind`) after the text emitted before it."""
    out, before = [], ""
    for r in rounds:
        for i, piece in enumerate(r.pieces):
            if i < r.n_accepted:
                pos = r.positions[i]
                out.append(Segment(piece, ACCEPTED, r.index, i, pos.p, pos.q, token_kind(piece, before)))
                before += piece
                continue
            if r.rejected_at is not None:
                pos = r.positions[r.rejected_at]
                out.append(Segment(pos.text, REJECTED, r.index, r.rejected_at, pos.p, pos.q,
                                   token_kind(pos.text, before)))
            out.append(Segment(piece, r.next_kind, r.index, i, r.next_token.prob, kind=token_kind(piece, before)))
            before += piece
    return [s for s in out if s.text]  # a token ending inside a character has no text of its own


def output_text(segs: list[Segment]) -> str:
    return "".join(s.text for s in segs if s.label != REJECTED)


def segment_detail(s: Segment) -> str:
    """A token's story in one line: what it is, where it came from, its numbers."""
    where = f"round {s.round + 1}, position {s.position + 1}" + (f" (class: {KIND_NAMES[s.kind]})" if s.kind else "")
    if s.label == ACCEPTED:
        nums = f"p {s.p:.3g}, q {s.q:.3g}, p/q {s.ratio:.3g}: kept"
    elif s.label == REJECTED:
        nums = f"p {s.p:.3g}, q {s.q:.3g}, p/q {s.ratio:.3g}: not in the output; the token after it took its place"
    else:
        nums = NextKind(s.label).text.format(p=f"{s.p:.3g}")
    return f"{s.text!r} {s.label}, {where}: {nums}"


PHASES_OF_A_ROUND = ("draft", "verify", "accept", "commit")  # what the step-through reveals, in order
STEP_NAMES = {"draft": "Draft", "verify": "Verify", "accept": "Accept/reject", "commit": "Commit and roll back"}
DASH = "—"
UNTESTED_WHY = {s: s.text for s in (UNREACHED, AFTER_STOP)}  # why a drafted token decided nothing
ROW_HEADERS = ["#", "token", "q(x)", "conf.", "p(x)", "p/q", "u", "verdict"]
COLUMNS = {"draft": 4, "verify": 5, "accept": 8, "commit": 8}  # the columns each phase has revealed


def position_rows(r: RoundTrace, phase: str) -> list[list]:
    """One row per drafted token, with the columns ``phase`` has revealed (:data:`COLUMNS`):
    q(x) and the draft's confidence after drafting; p(x) after the verifier's forward; p/q, u and
    the verdict after accept/reject. An untested position gets dashes and why, never numbers."""
    n = COLUMNS[phase]
    rows = []
    for i, pos in enumerate(r.positions):
        conf = DASH if pos.confidence is None else round(pos.confidence, 3)
        row = [i + 1, repr(pos.text), round(pos.q, 4), conf, round(pos.p, 4)]
        if n > 5:
            if pos.tested and pos.u is None:  # temperature 0: no draw, the draft is the argmax or it is not
                verdict = "kept: the verifier's argmax" if pos.status == ACCEPTED else "rejected: not the verifier's argmax"
                row += [round(pos.ratio, 3), DASH, verdict]
            elif pos.tested:
                verdict = "kept (u ≤ p/q)" if pos.status == ACCEPTED else "rejected (u > p/q)"
                row += [round(pos.ratio, 3), round(pos.u, 3), verdict]
            else:
                row = row[:4] + [DASH, DASH, DASH, Status(pos.status).text]
        rows.append(row[:n])
    return rows


def draft_stop_text(r: RoundTrace, k: int, confidence: float, quote=repr) -> str:
    """Why the round drafted as many tokens as it did, in one sentence (:class:`~specdec.trace.DraftStop`'s
    words; two for the hybrid drafter: who drafted, then why it stopped)."""
    n, last = len(r.positions), r.positions[-1] if r.positions else None
    tail = (f" (every token's confidence was at least {confidence:g})" if confidence and r.positions
            and r.positions[0].confidence is not None else "")
    sure = "" if last is None or last.confidence is None else f"{last.confidence:.2f}"
    paced = r.plan is not None and r.draft_stop != DraftStop.PACED
    return DraftedBy(r.drafted_by).text + DraftStop(r.draft_stop).text.format(
        drafted=plural(n, "token", "tokens"), k=k, last="" if last is None else quote(last.text), sure=sure,
        threshold=f"{confidence:g}", fits=f"{n + 1} more {'token fits' if n == 0 else 'tokens fit'}", tail=tail,
        plan="" if r.plan is None else plan_text(r.plan)) + (
        f" Adaptive K asked for {r.plan.k}: {plan_text(r.plan)}." if paced else "")


def plan_text(plan: DraftPlan) -> str:
    """Why an adaptive round drafted what it did (:mod:`specdec.decode.pacing`), from the numbers it chose
    by: a clause, for the Step tab and the round's figure. A tree drafter's round weighed trees too."""
    rate = [1e3 * t / ms for t, ms in zip(plan.tokens, plan.ms)]  # predicted tokens per second of each K
    tree = max(plan.trees, key=lambda t: t.tokens / t.ms, default=None)  # the best tree weighed
    trees = "" if tree is None else (f"the best tree, W = {tree.width}, N = {tree.budget}, {tree.tokens:.2f} tokens in "
                                     f"{tree.ms:.0f} ms, {1e3 * tree.tokens / tree.ms:.1f} tokens/s")
    if plan.k == 0:
        best = max(range(1, len(rate)), key=rate.__getitem__)
        return (f"at {plan.acceptance[0]:.0%} acceptance of a first draft here, a draft costs more than it returns. "
                f"A plain verifier step is predicted to give 1 token in {plan.ms[0]:.0f} ms ({rate[0]:.1f} tokens/s), "
                f"the best draft, K = {best}, {plan.tokens[best]:.2f} tokens in {plan.ms[best]:.0f} ms "
                f"({rate[best]:.1f} tokens/s){f', {trees}' if tree else ''}, from this run's acceptance and this "
                "machine's timed forwards")
    kept = ", ".join(f"a{i + 1} = {a:.2f}" for i, a in enumerate(plan.acceptance[:plan.k]))
    if plan.width == 1:
        if plan.explored:
            return (f"a plain verifier step was predicted faster, but this run's acceptance, raised by its "
                    f"uncertainty ({kept}), says {plural(plan.k, 'draft', 'drafts')} might pay: "
                    f"{plan.tokens[plan.k]:.2f} tokens in {plan.ms[plan.k]:.0f} ms ({rate[plan.k]:.1f} tokens/s) "
                    f"against {rate[0]:.1f} tokens/s; drafting is how the run learns whether they do")
        return (f"at this run's acceptance so far ({kept}), {plural(plan.k, 'draft is', 'drafts are')} predicted to "
                f"give {plan.tokens[plan.k]:.2f} tokens in {plan.ms[plan.k]:.0f} ms ({rate[plan.k]:.1f} tokens/s), the "
                f"most of any K from 0 (a plain verifier step, {rate[0]:.1f} tokens/s) to {len(rate) - 1}"
                f"{f' and any tree weighed ({trees})' if tree else ''}, by this machine's timed forwards")
    chosen = next(t for t in plan.trees if (t.width, t.budget) == (plan.width, plan.budget))
    second = ", ".join(f"{row[0]:.2f}" for row in plan.siblings[:plan.k])
    best = max(range(len(rate)), key=rate.__getitem__)
    chain = f"K = {best}" if best else "a plain verifier step"
    return (f"at this run's acceptance so far (first children {kept}; second children kept {second}, by depth), a tree "
            f"of W = {plan.width}, N = {plan.budget}, {plan.k} deep, is predicted to give {chosen.tokens:.2f} tokens in "
            f"{chosen.ms:.0f} ms ({1e3 * chosen.tokens / chosen.ms:.1f} tokens/s), the most of the "
            f"{plural(len(plan.trees), 'tree', 'trees')} weighed and of the chains (the best, {chain}, "
            f"{rate[best]:.1f} tokens/s), by this machine's timed forwards")


# A forward measured this many times slower than this machine's timed forwards predict is called busy.
BUSY = 1.5


def verify_cost_text(rows: int, verify_s: float, step_fit: tuple[float, float] | None) -> str:
    """The premise of the method, measured on this round: one verifier forward over ``rows`` positions
    (``verify_s``) against ``rows`` plain one-token steps, per position, from this machine's fitted line
    t(L) = t_f + t_r·L (``step_fit`` = (t_f, t_r) in ms; None while it is being timed). When the forward
    took much longer than the line predicts, or longer than the separate steps would, it says why in plain
    words. The fit's letters and v(K) are in :func:`cost_details`."""
    ms = 1e3 * verify_s
    head = f"One verifier forward checked all {rows} positions in {ms:.0f} ms"
    if step_fit is None:
        return (f"{head} (one measurement). This machine's one-token step is being timed in the background, once "
                "after the models load: step on to see this forward set against it.")
    t_f, t_r = step_fit
    step, predicted = t_f + t_r, t_f + t_r * rows
    out = (f"{head}; {rows} plain one-token steps would take about {rows} × {step:.0f} = {rows * step:.0f} ms here. "
           f"That is **{ms / rows:.0f} ms per position instead of {step:.0f} ms**: a one-token step spends most of its "
           "time reading the model's weights from memory, and the extra positions share that read, adding only "
           f"their arithmetic (about {t_r:.1f} ms each on this machine).")
    if ms > BUSY * predicted or ms >= rows * step:
        cheaper = ("This time it was no cheaper than the separate steps: " if ms >= rows * step else
                   "This time it was slow: ")
        out += (f" {cheaper}this machine's timed forwards predict about {predicted:.0f} ms for {rows} positions, "
                f"and this one took {ms / predicted:.1f}x that. Something else used the cores at that moment (this "
                "page being drawn in your browser counts); step on and compare the next rounds.")
    return out


def cost_details(k: int, verify_s: float, step_fit: tuple[float, float] | None) -> str:
    """The letters behind :func:`verify_cost_text`, for a "cost details" toggle: the fitted line and this
    forward in one-token forwards, t(K + 1) / t(1), and how the Compare tab's v(K) differs from it
    (docs/notation.md). "" while no fit is at hand."""
    if step_fit is None:
        return ""
    t_f, t_r = step_fit
    ms, step = 1e3 * verify_s, t_f + t_r
    return (f"The fit: t(L) = t_f + t_r·L = {t_f:.0f} + {t_r:.1f}·L ms for a verifier forward over L positions, timed on "
            f"this machine once after the models loaded (docs/notation.md). So a one-token forward is t(1) = {step:.0f} "
            f"ms, the line predicts t({k + 1}) = {t_f + t_r * (k + 1):.0f} ms for this forward, and it took {ms:.0f} ms: "
            f"this forward / t(1) = {ms / step:.2f} one-token forwards for K = "
            f"{plural(k, 'drafted token', 'drafted tokens')}. The forward pays when that is well under K + 1. The "
            "Compare tab's v(K) is the same kind of ratio for a whole verification: the forward with the accept/reject "
            "and rollback around it, over a verifier-only step t1 measured in the race.")


def explain(r: RoundTrace, phase: str, drafter: str = MODEL.name, greedy: bool = False,
            step_fit: tuple[float, float] | None = None, quote=repr) -> str:
    """One paragraph on what the phase just did and why the rule keeps the verifier's distribution.
    ``quote``: how a token's text is written in the sentence (``repr``; the figure marks its whitespace).
    ``step_fit``: this machine's verifier cost t_f + t_r·L in ms (:func:`verify_cost_text`), or None."""
    k = r.drafted
    if phase == "draft":
        if k == 0:
            why = (f"Adaptive K drafted nothing: {plan_text(r.plan)}." if r.draft_stop == DraftStop.PACED and r.plan else
                   "Only one more token fits in the budget, so nothing was drafted." if r.draft_stop == DraftStop.BUDGET
                   else "The drafter proposed nothing this round (no earlier occurrence of the context's last tokens "
                   "to copy from).")
            return f"**Draft.** {why} The round is one plain verifier step."
        how = ("Prompt lookup copied the tokens that followed the latest earlier occurrence of the context's last "
               "n-gram; it is deterministic, so q is one-hot (q(x) = 1) and a token will be kept with probability "
               "p(x)." if drafter == LOOKUP.name or r.drafted_by == DraftedBy.LOOKUP else
               f"The small draft model ran {plural(k, 'cheap forward pass', 'cheap forward passes')}, sampling each token "
               "from its distribution q and reporting exactly that q(x)." + (
                   " (This drafter uses the model only where nothing earlier matched well enough to copy.)"
                   if r.drafted_by == DraftedBy.MODEL else ""))
        return (f"**Draft.** {how} Nothing is committed yet: the {plural(k, 'token is', 'tokens are')} only a guess at "
                "the verifier's output.")
    if phase == "verify":
        if k == 0:
            return ("**Verify.** One verifier forward produced p for the next position, exactly as plain decoding "
                    "would.")
        return (f"**Verify.** One verifier forward read the last context token and the {plural(k, 'draft', 'drafts')}. "
                "It gives p at every drafted position (each assuming the drafts before it are kept) and at the "
                f"position after the last draft. Nothing is decided yet. "
                f"{verify_cost_text(k + 1, r.times.verify, step_fit)}")
    if phase == "accept":
        if k == 0:
            return (f"**Accept/reject.** Nothing to test: {quote(r.next_token.text)} was drawn from p, as plain "
                    "decoding would.")
        head = ("**Accept/reject.** At temperature 0 p and q are one-hot: a draft is kept exactly when it is the "
                "verifier's argmax (p/q = 1), and no draw u is made; the first rejection ends the round and the "
                "drafts after it are never tested. " if greedy else
                "**Accept/reject.** Token i is kept when its draw u_i ≤ p(x)/q(x), that is with probability "
                "min(1, p/q); the first rejection ends the round and the drafts after it are never tested. ")
        if r.next_kind is None:
            stop = r.positions[r.n_accepted - 1]
            tail = (f"The kept drafts include the stop token {quote(stop.text)} at position {r.n_accepted}: the output ends "
                    "there, so the drafts after it and the next token are dropped.")
        elif r.rejected_at is None:
            tail = (f"{'It' if k == 1 else f'All {k}'} passed, and the same forward already holds p for the next "
                    "position, so the bonus token "
                    f"{quote(r.next_token.text)} is drawn from p at no extra cost.")
        else:
            x = r.positions[r.rejected_at]
            tail = (f"Position {r.rejected_at + 1} ({quote(x.text)}) is not the verifier's argmax, so it is rejected and "
                    f"replaced by the verifier's argmax {quote(r.next_token.text)}." if greedy else
                    f"Position {r.rejected_at + 1} ({quote(x.text)}) failed: u = {x.u:.3f} > p/q = {x.ratio:.3f}. "
                    f"The replacement {quote(r.next_token.text)} is drawn from the residual norm(max(0, p − q)). Where "
                    "the draft over-proposes a token (q > p) it is kept only with probability p/q, and the residual "
                    "puts back exactly the mass that was removed, so every emitted token is distributed as p.")
        if greedy:
            tail += " So the output equals greedy decoding of the verifier."
        return head + tail
    cut = r.target_cache[0] - r.target_cache[1]
    how = (f"The verifier's KV cache was cut back by {plural(cut, 'entry', 'entries')}, dropping what it computed for "
           "drafts that were not kept, so that it holds every context token but the last."
           if cut > 0 else "Every entry the verifier computed belongs to kept tokens, so its KV cache needed no cut; "
           "it holds every context token but the last, as before every round.")
    paced = (f" This round drafted {plural(r.drafted, 'token', 'tokens')} by Adaptive K's choice: {plan_text(r.plan)}."
             if r.plan is not None else "")
    return (f"**Commit and roll back.** {plural(len(r.emitted), 'token', 'tokens')} joined the context. {how} The next "
            f"round starts from the new context.{paced}")


def plural(n: int, one: str, many: str) -> str:
    """"1 token", "2 tokens"."""
    return f"{n} {one if n == 1 else many}"


def cache_text(r: RoundTrace, phase: str = "commit") -> str:
    """The KV-cache lengths as far as ``phase``: before each round each cache holds every context
    token but the last; the forward adds K+1 entries; the rollback cuts what was not kept."""
    before = r.context_len - 1
    out = f"Verifier KV cache: {before} before the round"
    if phase == "draft":
        out += "; the verifier has not run yet."
    else:
        out += f", {r.target_cache[0]} after the forward"
        out += f", {r.target_cache[1]} after the rollback." if phase == "commit" else " (not rolled back yet)."
    if r.draft_cache is not None:
        out += f" Draft KV cache: {r.draft_cache[0]} after drafting"
        out += f", {r.draft_cache[1]} after the rollback." if phase == "commit" else "."
        if phase == "commit" and r.draft_cache[1] < r.target_cache[1]:
            out += (" The draft's cache is one shorter: it never ran its last drafted token through itself (that "
                    "token was kept, so nothing needed it); it catches up in its next forward.")
    return out


@dataclass(frozen=True)
class RoundStats:
    """Per-round series for the acceptance and tokens-per-round charts."""

    rounds: list[int]            # 1-based round numbers
    accepted: list[int]
    drafted: list[int]
    running_a: list[float]       # a, kept / tested so far (theory.running_acceptance)
    running_tokens: list[float]  # mean emitted tokens per round so far
    k: int                       # the most drafted in one round


def round_stats(rounds: list[RoundTrace]) -> RoundStats:
    tokens, running_tokens = 0, []
    for n, r in enumerate(rounds, 1):
        tokens += len(r.emitted)
        running_tokens.append(tokens / n)
    return RoundStats([r.index + 1 for r in rounds], [r.n_accepted for r in rounds], [r.drafted for r in rounds],
                      running_acceptance(rounds), running_tokens, max((r.drafted for r in rounds), default=0))


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, or None when the sequences are equal."""
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return None if i == len(a) == len(b) else i


# ---- a tree round (issue 16): its sibling tests, its story and its caches ----------------------

def draft_depth(r: RoundTrace) -> int:
    """How far a round drafted ahead: the K drafted for a chain, its deepest node for a tree. The K
    of the theory curve E(a, K): a tree advances at most one depth per test that succeeds."""
    return r.drafted if r.tree is None else max(n.depth for n in r.tree.nodes)

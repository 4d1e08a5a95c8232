"""The drafters' race: one prompt, one verifier, every drafter, the same settings, one after another.

Each row is one run, measured as the Run tab and the throughput benchmark measure it (decode only:
the prompt's prefill excluded), against the verifier-only run of the same settings:

* **tokens / round**: tokens emitted per verifier forward (a plain step emits 1);
* **a = kept / tested**: drafts kept over drafts the rule decided on (a tree: its accepted path and the
  first rejected child, its chain view: :func:`specdec.teach.theory.acceptance`);
* **c**: drafting time per drafted token, in verifier-only steps (Leviathan et al.'s c, measured:
  :class:`specdec.teach.theory.CostModel`); about 0 for the drafters that copy (no forward);
* **decode tok/s**: tokens per second of the rounds' compute, the prompt's prefill excluded;
* **speed-up**: decode tok/s over the verifier-only run's decode tok/s;
* **identical**: at temperature 0, whether the output is the verifier-only output token for token
  (it must be: every drafter is lossless); at T > 0 outputs differ by design and nothing is claimed.

Each kept token is credited to whoever proposed it (the model, prompt lookup, the suffix tree), every
other token to the verifier (a resample, a bonus, a plain step), so the app can colour them.

The suffix tree's pool of earlier runs (:mod:`specdec.decode.suffix`) is held still during a race:
no drafter reads another's output of the same prompt. After the race the verifier-only run joins the
pool, as any run does, so that racing the same prompt again shows what a second run of a task gains.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterator

from specdec.decode.registry import (
    DRAFTERS,
    HYBRID,
    LOOKUP,
    MODEL,
    SELF,
    SUFFIX,
    SUFFIX_MODEL,
    TREE,
    VERIFIER_ONLY,
)
from specdec.decode.engine import Generation
from specdec.decode.start import start
from specdec.decode.suffix import Document, session_pool
from specdec.options import ConfigError, DecodeConfig, flat
from specdec.teach.theory import acceptance, cost_model, decode_tokens_per_s
from specdec.teach.whatif import position_counts
from specdec.trace import DraftedBy

RACERS = (VERIFIER_ONLY.name, MODEL.name, LOOKUP.name, HYBRID.name, SUFFIX.name, SUFFIX_MODEL.name, SELF.name,
          TREE.name)
# The columns' definitions, in the words of this docstring, for a table to show beside its numbers.
DEFINITIONS = {
    "tokens / round": "tokens emitted per verifier forward (a plain step emits 1)",
    "a = kept / tested": "drafts kept over drafts the rule decided on",
    "c": "drafting time per drafted token, in verifier-only steps (Leviathan et al.'s c, measured); about 0 for "
         "the drafters that copy (no forward)",
    "decode tok/s": "tokens per second of the rounds' compute, the prompt's prefill excluded",
    "speed-up": "decode tok/s over the verifier-only run's decode tok/s",
    "identical": "at temperature 0, whether the output is the verifier-only output token for token (it must be: "
                 "every drafter is lossless); at T > 0 outputs differ by design and nothing is claimed",
}
VERIFIER = "verifier"  # a token the verifier chose itself: a resample, a bonus, a plain step
# who proposes a kept token of each drafter that does not say per round
PROPOSER = {MODEL.name: str(DraftedBy.MODEL), TREE.name: str(DraftedBy.MODEL), LOOKUP.name: str(DraftedBy.LOOKUP),
            SUFFIX.name: str(DraftedBy.SUFFIX), SELF.name: str(DraftedBy.SELF)}


@dataclass(frozen=True)
class RaceRow:
    drafter: str                  # its name (the command line's), and its words
    label: str
    tokens: int                   # emitted
    rounds: int                   # verifier forwards after the prefill
    tokens_per_round: float
    acceptance: float | None      # a = kept / tested; None where nothing was drafted
    c: float | None               # drafting time per drafted token / t1; None where nothing was drafted
    decode_tok_s: float
    speedup: float                # decode tok/s / the verifier-only run's
    identical: bool | None        # greedy: the verifier-only output exactly; None at T > 0
    kept_by: dict                 # kept drafts by proposer; the verifier's own tokens under "verifier"
    drafted_per_round: float      # drafted tokens (a tree: nodes) per round
    per_position: tuple           # (kept, tested) per draft position of its chains (specdec.teach.whatif)
    pieces: tuple                 # (text, proposer) per emitted token, for the colour-coded output
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Race:
    prompt: str
    settings: dict                # the DecodeConfig every row ran with
    rows: tuple[RaceRow, ...]     # verifier-only first
    skipped: tuple[str, ...]      # drafters not run, and why

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "settings": self.settings, "rows": [r.to_dict() for r in self.rows],
                "skipped": list(self.skipped)}

    def table(self) -> str:
        """The rows as aligned text, one per drafter."""
        head = f"{'drafter':26s} {'tok/round':>9s} {'a':>6s} {'c':>6s} {'tok/s':>7s} {'speed-up':>8s}  identical"
        lines = [head]
        for r in self.rows:
            a = "-" if r.acceptance is None else f"{r.acceptance:.0%}"
            c = "-" if r.c is None else f"{r.c:.2f}"
            same = "-" if r.identical is None else "yes" if r.identical else "NO"
            lines.append(f"{r.label:26s} {r.tokens_per_round:9.2f} {a:>6s} {c:>6s} {r.decode_tok_s:7.2f} "
                         f"{r.speedup:7.2f}x  {same}")
        return "\n".join(lines + [f"not run: {s}" for s in self.skipped])


def proposer(drafter: str, round_) -> str:
    """Who proposed a round's kept drafts."""
    if round_.drafted_by and round_.drafted_by != DraftedBy.NOT_HYBRID:
        return str(round_.drafted_by)
    return PROPOSER.get(drafter, drafter)


def row(drafter: str, gen: Generation, base: Generation, greedy: bool) -> RaceRow:
    """One run's row against the verifier-only run ``base`` of the same settings (module docstring)."""
    rounds = gen.rounds
    drafted = sum(r.drafted for r in rounds)
    costs = cost_model(base.rounds, rounds) if drafter != VERIFIER_ONLY.name else None
    kept_by: dict[str, int] = {}
    pieces = []
    for r in rounds:
        who = proposer(drafter, r)
        for i, piece in enumerate(r.pieces):
            src = who if i < r.n_accepted else VERIFIER
            kept_by[src] = kept_by.get(src, 0) + 1
            pieces.append((piece, src))
    base_rate = decode_tokens_per_s(base.rounds)
    rate = decode_tokens_per_s(rounds)
    return RaceRow(drafter, DRAFTERS[drafter].label, len(gen.token_ids), len(rounds),
                   len(gen.token_ids) / len(rounds) if rounds else 0.0,
                   acceptance(rounds) if drafted else None, costs.c if costs else None, rate,
                   rate / base_rate if base_rate else 0.0, gen.token_ids == base.token_ids if greedy else None,
                   kept_by, drafted / len(rounds) if rounds else 0.0,
                   position_counts(rounds), tuple(pieces), gen.text)


def heats(pair, prompt: str, cfg: DecodeConfig, drafters: tuple[str, ...] = RACERS,
          chat: bool = True) -> Iterator[tuple[str, Generation | str]]:
    """The race one run at a time: (drafter, its generation, not run yet), verifier-only first, then
    each of ``drafters``; in place of a generation, why that drafter cannot run on ``pair``. The
    caller drives each generation (``run()``, or a round at a time) before asking for the next; the
    pool is held still throughout, and once the last has been driven the verifier-only run joins it.
    Closed early (a stopped race), it leaves the pool as it was."""
    unknown = [d for d in drafters if d not in DRAFTERS]
    if unknown:
        raise ConfigError(f"drafters must be among {', '.join(DRAFTERS)} (got {', '.join(unknown)})", "drafters")
    pool = session_pool(pair.target_name)
    before = list(pool.documents)
    base = start(pair, prompt, cfg, VERIFIER_ONLY.name, chat)
    for drafter in (VERIFIER_ONLY.name, *(d for d in drafters if d != VERIFIER_ONLY.name)):
        if DRAFTERS[drafter].needs_draft and pair.draft is None:
            yield drafter, "needs a draft model (none is loaded)"
            continue
        try:
            gen = base if drafter == VERIFIER_ONLY.name else start(pair, prompt, cfg, drafter, chat)
        except ConfigError as e:  # a drafter these models cannot run (the tree without the lean forward)
            yield drafter, str(e)
            continue
        try:
            yield drafter, gen
        finally:
            pool.documents[:] = before  # no racer reads another's output of this prompt
    ids, hidden = pair.encode_marked(prompt, chat=chat)  # the race, like any run, joins the pool once
    doc = Document()
    doc.extend(ids + base.token_ids, hidden)
    pool.add(doc)


def race(pair, prompt: str, cfg: DecodeConfig, drafters: tuple[str, ...] = RACERS, chat: bool = True,
         progress=None) -> Race:
    """Run ``prompt`` with verifier-only decoding, then with each of ``drafters`` (module docstring).
    ``progress(fraction, message)`` is told before each run."""
    rows: list[RaceRow] = []
    skipped: list[str] = []
    base = None
    n = 1 + len([d for d in drafters if d != VERIFIER_ONLY.name])
    for i, (drafter, gen) in enumerate(heats(pair, prompt, cfg, drafters, chat)):
        if isinstance(gen, str):
            skipped.append(f"{drafter}: {gen}")
            continue
        if progress:
            progress(i / n, f"racing: {DRAFTERS[drafter].label}")
        gen.run()
        base = base or gen
        rows.append(row(drafter, gen, base, cfg.sampling.greedy))
    if progress:
        progress(1.0, "race done")
    return Race(prompt, flat(cfg), tuple(rows), tuple(skipped))

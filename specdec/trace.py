"""Typed, frozen records of a run: one :class:`RoundTrace` per draft/verify round, a summary, and
the trace file that holds them.

The engine yields these and never prints; the CLI, the app, the benchmarks and the notebooks only
render or aggregate them. :class:`TraceFile` is the JSON format the CLI writes, the app downloads,
and both replay without models. Its vocabulary (a token's status, why drafting or the run ended,
who drafted) is names (:class:`Named`), written to JSON as their strings and read back as names.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from enum import StrEnum
from types import NoneType, UnionType
from typing import get_args, get_origin, get_type_hints

PHASES = ("draft", "verify", "accept", "rollback", "other")
TRACE_FORMAT = 10
# 5 added RoundTrace.drafted_by (format 4 files read as ""), 6 RoundTrace.tree (older: None),
# 7 RoundTrace.plan (older: None), 8 the plan's tree (DraftPlan.width, budget, siblings, branching, trees;
# older: a chain's plan), 9 DraftPlan.explored (older: False), 10 the suffix tree (drafted_by "suffix",
# RoundTrace.match, TreeRound.copied; older: 0, False)
READS_FORMATS = (4, 5, 6, 7, 8, 9, 10)


# ---- the names a trace uses: each is written to JSON as its string, and carries its words ----

class Named(StrEnum):
    """A name of the trace's vocabulary: compared and written to JSON as its string, with the
    words a reader is shown for it (``text``)."""

    def __new__(cls, value: str, text: str = ""):
        member = str.__new__(cls, value)
        member._value_, member.text = value, text
        return member


class Status(Named):
    """What the rule made of a drafted token: a chain's position (ACCEPTED, REJECTED, UNREACHED,
    AFTER_STOP) or a tree's node (ROOT, ACCEPTED, REJECTED, UNTESTED)."""

    ACCEPTED = "accepted", "kept"
    REJECTED = "rejected", "rejected"
    UNREACHED = "unreached", "not tested: after the rejection"
    # after a kept draft that is a stop token, so never emitted whatever the rule said; it counts
    # neither as drafted nor as tested in the summaries
    AFTER_STOP = "after_stop", "not emitted: after the stop token"
    ROOT = "root", "the root: the last context token"
    # a tree's node never tested: a sibling before it was accepted, or its parent was not reached
    UNTESTED = "untested", "not tested"


class NextKind(Named):
    """The token that ends a round: drawn from the residual after a rejection, the bonus drawn
    from p when every draft was kept, or drawn from p in a round that drafted nothing (plain
    decoding: the verifier-only baseline, or prompt lookup without a match). ``text`` is a
    template with the field ``{p}``, the token's probability."""

    RESAMPLED = "resampled", "drawn from the residual norm(max(0, p − q)), probability {p}"
    BONUS = "bonus", "bonus, drawn from p, probability {p}"
    PLAIN = "plain", "drawn from p, probability {p} (nothing drafted)"


class DraftStop(Named):
    """Why drafting ended. A proposal says LIMIT when it reached the depth it was asked for; the
    round records that as K, or as BUDGET when fewer tokens than K fitted in the run's budget.

    ``text`` is a chain round's sentence, ``tree_text`` a tree round's clause ("" where a tree
    never stops so): str.format templates whose fields are filled by
    :func:`specdec.teach.render.draft_stop_text` (``{drafted}``, ``{k}``, ``{last}``, ``{sure}``,
    ``{threshold}``, ``{fits}``, ``{tail}``) and :func:`specdec.teach.render_tree.tree_explain`
    (``{k}``, ``{depth}``, ``{budget}``, ``{threshold}``)."""

    def __new__(cls, value: str, text: str, tree_text: str = ""):
        member = str.__new__(cls, value)
        member._value_, member.text, member.tree_text = value, text, tree_text
        return member

    K = "k", "Drafted K = {k} tokens{tail}.", "it stopped at depth K = {k}"
    BUDGET = ("budget",
              ("Drafted {drafted}, fewer than K = {k}: only {fits} in the budget (max new tokens or the context)."),
              ("it stopped at depth {depth}, short of K = {k}: no more tokens fit in the budget (max new tokens or "
               "the context)"))
    CONFIDENCE = ("confidence",
                  ("Drafting stopped after {drafted}: the draft's confidence in {last} was {sure}, below the "
                   "threshold {threshold} (its top probability before temperature, in the conf. column)."),
                  ("it stopped there: even its most probable node's draft was less sure than the confidence "
                   "threshold {threshold} (its top probability before temperature)"))
    STOP_TOKEN = ("stop_token", "Drafting stopped after {drafted}: {last} is a stop token.",
                  "it stopped where every node left to expand was a stop token")
    NO_MATCH = ("no_match", "Nothing to copy: no earlier occurrence of the last tokens was found (prompt lookup reads "
                "the prompt and the output; the suffix tree also earlier runs, and needs the last 2 tokens to match).")
    COPY_END = ("copy_end", "Copied {drafted}: all that followed its match.",
                "it copied all that followed its match")
    NOTHING = "nothing", "Verifier only: nothing is drafted."
    PACED = ("paced", "Drafted {drafted}, fewer than K = {k}: {plan}.")
    TREE_BUDGET = "tree_budget", "Drafted K = {k} tokens{tail}.", "it stopped at its budget of N = {budget} nodes"
    LIMIT = "limit", "Drafted K = {k} tokens{tail}."  # a proposal's only: the round records K or BUDGET


class DraftedBy(Named):
    """Who drafted a composed drafter's round (lookup or suffix, else model: RoundTrace.drafted_by); ``text`` opens the sentence
    that says why the round drafted what it did."""

    NOT_HYBRID = "", ""  # any other drafter: the trace names nobody
    LOOKUP = ("lookup", ("Prompt lookup drafted this round: it found the last tokens earlier and copied what "
                         "followed, with no draft forward. "))
    MODEL = "model", "The draft model drafted this round: nothing earlier matched the last tokens well enough to copy. "
    SELF = "self", "The verifier with some of its layers skipped drafted this round. "
    SUFFIX = ("suffix", ("The suffix tree drafted this round: the last tokens occurred before (in the prompt, the "
                         "output or an earlier run), and it proposed what followed them, each branch as often as it "
                         "followed, with no draft forward. "))


class RunStop(Named):
    """Why a run ended (``Generation.stop_reason``, a trace file's ``stop_reason``)."""

    EOS = "eos", "a stop token"
    MAX_NEW_TOKENS = "max_new_tokens", "the most new tokens asked for"
    CONTEXT = "context", "the end of the models' context"
    CANCELLED = "cancelled", "cancelled"


# The members by their own names, as the renderers and the app read them (as re.IGNORECASE is re.RegexFlag's)
ACCEPTED, REJECTED, UNREACHED, AFTER_STOP = Status.ACCEPTED, Status.REJECTED, Status.UNREACHED, Status.AFTER_STOP
ROOT, UNTESTED = Status.ROOT, Status.UNTESTED
RESAMPLED, BONUS, PLAIN = NextKind.RESAMPLED, NextKind.BONUS, NextKind.PLAIN
TESTED = (ACCEPTED, REJECTED)


@dataclass(frozen=True)
class TokenProb:
    token_id: int
    text: str
    prob: float


@dataclass(frozen=True)
class Candidate:
    """A token both distributions are shown for at a drafted position: p and q on one axis."""

    token_id: int
    text: str
    p: float
    q: float


@dataclass(frozen=True)
class DraftPosition:
    """One drafted token and what the verifier made of it. The verifier's forward gives p at every
    drafted position, each assuming the drafts before it are kept; only the positions up to the
    first rejection are *tested*. An untested one (unreached, after_stop) has no ratio and no u:
    its p was computed on a context that holds a rejected or never-emitted token, and decides nothing."""

    token_id: int
    text: str
    q: float                      # draft probability of the token (what it was sampled from)
    p: float                      # verifier probability of the token, given the drafts before it
    ratio: float | None           # p / q; kept iff u <= ratio. None when untested
    u: float | None               # the uniform draw in (0, 1]. None when untested
    beta: float                   # sum_v min(p(v), q(v)): expected acceptance here, free of coin-flip noise
    status: Status                # ACCEPTED | REJECTED | UNREACHED (after the first rejection) | AFTER_STOP
    candidates: tuple[Candidate, ...]  # the top of p and of q, and the drafted token: p and q of each
    confidence: float | None = None    # the draft's untempered top probability, as its confidence test read it

    @property
    def tested(self) -> bool:
        return self.status in TESTED


@dataclass(frozen=True)
class PhaseTimes:
    """Wall seconds per phase of a round; ``forward`` is the model-forward part of draft + verify."""

    draft: float = 0.0
    verify: float = 0.0
    accept: float = 0.0
    rollback: float = 0.0
    other: float = 0.0
    forward: float = 0.0

    @property
    def total(self) -> float:
        return self.draft + self.verify + self.accept + self.rollback + self.other


@dataclass(frozen=True)
class TreeNode:
    """One node of a round's token tree and what the rule made of it (SpecInfer; recursive
    rejection sampling, :func:`specdec.decode.rule.verify_tree`). Children are tested in index order:
    each against the residual the previous sibling's rejection left (``residual_top``)."""

    parent: int                   # index of the parent node; -1 for the root
    token_id: int
    text: str
    depth: int                    # 0 for the root (the last context token)
    q: float                      # the draft's q(token) at its parent (before earlier siblings were removed)
    path_q: float                 # product of q along the path: how the drafter ranked the node
    p: float                      # the verifier's p(token) at its parent
    status: Status                # ROOT | ACCEPTED | REJECTED | UNTESTED
    ratio: float | None           # r(x) / q_i(x) at the test (temperature 0: p(x), 0 or 1); None if untested
    u: float | None               # the draw; None if untested or at temperature 0
    residual_top: tuple[TokenProb, ...] = ()  # after this node's rejection: top of the residual next tested


@dataclass(frozen=True)
class TreeRound:
    """A tree round: every node drafted, its shape parameters, and the verifier's cache
    indices kept (the accepted path's entries, moved into place after the context)."""

    nodes: tuple[TreeNode, ...]
    width: int
    budget: int
    kept: tuple[int, ...]         # node indices of the accepted path, in depth order
    copied: bool = False          # copied, not drawn (the suffix tree): each node's q is one-hot at its token


@dataclass(frozen=True)
class TreeOption:
    """One tree shape an adaptive round weighed: what a round of it was expected to return and cost."""

    width: int                       # W, the most children of an expanded node
    budget: int                      # N, the most nodes
    tokens: float                    # expected tokens: 1 + the sum over its nodes of the chance each is kept
    ms: float                        # the round's predicted ms here


@dataclass(frozen=True)
class DraftPlan:
    """How an adaptive run chose a round's draft (:mod:`specdec.decode.pacing`): from the running
    acceptance per depth and sibling rank and this machine's timed costs, before the round, the chain
    or tree with the most expected tokens per ms. Index K of ``tokens`` and ``ms`` is what a chain of K
    drafts was expected to return and cost (K = 0: a plain verifier step); ``trees`` the tree shapes
    weighed beside them (a tree drafter's run; none for the chain drafters)."""

    k: int                           # the draft length chosen; a tree's: its most depth
    acceptance: tuple[float, ...]    # a_1..a_Kmax: a first child kept once its parent was (prior + counts;
                                     # where ``explored``, each raised by one standard error)
    evidence: tuple[float, ...]      # the decayed count of tested drafts behind each a_i (0: the prior alone)
    tokens: tuple[float, ...]        # E(K) = 1 + a_1 + a_1 a_2 + ..., K = 0..Kmax
    ms: tuple[float, ...]            # T(K), the round's predicted ms here, K = 0..Kmax
    width: int = 1                   # the tree chosen: W (1: the chain of k drafts)
    budget: int = 0                  # its N (0: a chain)
    siblings: tuple[tuple[float, ...], ...] = ()   # per depth, a of the 2nd, 3rd... child: kept once tested
    branching: tuple[tuple[float, ...], ...] = ()  # per depth, the share of expanded nodes given a 2nd, 3rd... child
    trees: tuple[TreeOption, ...] = ()
    explored: bool = False           # drafted though a plain step was predicted faster: the estimates,
                                     # raised by their uncertainty, said a draft might pay (pacing.Pacer.plan)

    @property
    def asked(self) -> int:
        """The most drafts the round asked for: K for a chain, N for a tree."""
        return self.k if self.width == 1 else self.budget


@dataclass(frozen=True)
class RoundTrace:
    """One round. Invariants (tests/decode/test_engine.py): ``len(emitted) == n_accepted + 1`` and
    ``next_kind`` is set, unless the round ended at a stop token among the kept drafts, where
    ``len(emitted) == n_accepted`` and ``next_kind`` is None; ``next_kind == BONUS`` iff every
    draft was kept and emitted; the positions after ``n_accepted`` are rejected (the first),
    unreached, or after_stop."""

    index: int
    context_len: int                       # context tokens (prompt included) before the round
    positions: tuple[DraftPosition, ...]   # the drafted tokens (fewer than K near a limit; none for the baseline)
    n_accepted: int                        # drafts kept *and emitted*
    rejected_at: int | None                # index into positions, or None when nothing was rejected
    next_kind: NextKind | None             # None when a stop token ended the drafts
    next_token: TokenProb | None           # prob under the distribution it was drawn from
    next_top: tuple[TokenProb, ...]        # top of that distribution (residual, or p)
    emitted: tuple[int, ...]               # ids emitted this round, cut after a stop token
    pieces: tuple[str, ...]                # output text of each emitted id; joined over rounds = the text
    target_cache: tuple[int, int]          # verifier KV length (after the forward, after rollback)
    draft_cache: tuple[int, int] | None    # draft KV length likewise; None without a draft model
    times: PhaseTimes
    elapsed: float                         # seconds since the run started, at the end of this round
    draft_stop: DraftStop = DraftStop.K    # why drafting ended (never LIMIT: the round tells K from BUDGET)
    drafted_by: DraftedBy = DraftedBy.NOT_HYBRID  # who drafted a hybrid drafter's round
    match: int = 0  # a copying drafter's match: how many of the context's last tokens it found earlier
    tree: TreeRound | None = None          # a tree round's every node; positions then hold its accepted path
                                           # and the first rejected child below it
    plan: DraftPlan | None = None          # an adaptive run's choice for this round (None: K as asked)

    @property
    def drafted(self) -> int:
        """Drafts that count: those emitted or tested, not those after a stop token (a tree: every node)."""
        if self.tree is not None:
            return len(self.tree.nodes) - 1
        return sum(p.status != AFTER_STOP for p in self.positions)

    @property
    def tested(self) -> int:
        """Drafts the rule decided on: the kept ones and the first rejected one."""
        return sum(p.tested for p in self.positions)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "round") -> RoundTrace:
        """A round read back from JSON, every field checked for its type and range (traces are
        files people share): ValueError naming the field and what is allowed."""
        return _read(cls, d, where)


@dataclass(frozen=True)
class RunSummary:
    new_tokens: int
    wall_s: float                  # prefill + all rounds
    prefill_s: float
    tokens_per_s: float
    rounds: int
    target_forwards: int           # prefill included
    drafted: int
    accepted: int
    acceptance_rate: float         # accepted / drafted
    mean_tokens_per_round: float
    per_position_acceptance: tuple[float, ...]  # P(position i kept | position i reached and drafted)
    accepted_histogram: tuple[int, ...]         # rounds that kept 0, 1, ..., K drafted tokens
    phase_totals: dict = field(default_factory=dict)
    overhead_share: float = 0.0    # share of wall time outside model forwards

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(rounds: list[RoundTrace], prefill_s: float = 0.0) -> RunSummary:
    new_tokens = sum(len(r.emitted) for r in rounds)
    wall = prefill_s + sum(r.times.total for r in rounds)
    drafted = sum(r.drafted for r in rounds)
    accepted = sum(r.n_accepted for r in rounds)
    k_max = max((len(r.positions) for r in rounds), default=0)
    reached = [0] * k_max
    kept = [0] * k_max
    hist = [0] * (k_max + 1)
    for r in rounds:
        hist[r.n_accepted] += 1
        for i, pos in enumerate(r.positions):
            if pos.tested:
                reached[i] += 1
                kept[i] += pos.status == ACCEPTED
    totals = {ph: sum(getattr(r.times, ph) for r in rounds) for ph in PHASES}
    forward = sum(r.times.forward for r in rounds) + prefill_s
    totals["prefill"] = prefill_s
    return RunSummary(
        new_tokens=new_tokens,
        wall_s=wall,
        prefill_s=prefill_s,
        tokens_per_s=new_tokens / wall if wall > 0 else 0.0,
        rounds=len(rounds),
        target_forwards=len(rounds) + (1 if prefill_s > 0 else 0),
        drafted=drafted,
        accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_tokens_per_round=new_tokens / len(rounds) if rounds else 0.0,
        per_position_acceptance=tuple(k / n if n else 0.0 for k, n in zip(kept, reached)),
        accepted_histogram=tuple(hist),
        phase_totals=totals,
        overhead_share=max(0.0, 1 - forward / wall) if wall > 0 else 0.0,
    )


@dataclass(frozen=True)
class TraceFile:
    """A whole run as one JSON object: the settings record (``RunSettings.to_dict()``), the text,
    the summary and every round. Written by ``generate --json`` and the app's download; read by
    the app's replay."""

    settings: dict
    rounds: tuple[RoundTrace, ...]
    prefill_s: float
    text: str
    stop_reason: str | None  # a RunStop; its string when read back

    def to_json(self) -> str:
        return json.dumps({"format": TRACE_FORMAT, "settings": self.settings, "text": self.text,
                           "token_ids": [t for r in self.rounds for t in r.emitted], "stop_reason": self.stop_reason,
                           "summary": summarize(list(self.rounds), self.prefill_s).to_dict(),
                           "rounds": [r.to_dict() for r in self.rounds]})

    @classmethod
    def from_json(cls, raw: str) -> TraceFile:
        """ValueError, saying what is wrong, if ``raw`` is not a trace file of this format."""
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or "rounds" not in data:
                raise ValueError("no rounds")
            if data.get("format") not in READS_FORMATS:
                raise ValueError(f"format {data.get('format')!r}, this version reads formats "
                                 f"{', '.join(map(str, READS_FORMATS))}")
            return cls(data.get("settings") or {}, tuple(RoundTrace.from_dict(d, f"rounds[{i}]")
                                                          for i, d in enumerate(data["rounds"])),
                       float(data["summary"]["prefill_s"]), str(data["text"]), data.get("stop_reason"))
        except RecursionError:  # nesting deeper than any trace: json gives up rather than overflow
            raise ValueError("not a specdec trace file (nested too deeply)") from None
        except KeyError as e:
            raise ValueError(f"not a specdec trace file: it has no field {e}") from None
        except (ValueError, TypeError, AttributeError) as e:  # the field checks below name the field and the rule
            raise ValueError(f"not a specdec trace file: {e}") from None


# ---- reading a trace back: every field checked against its declared type and range ------------
# probabilities and draws: in [0, 1]
UNIT = {"prob", "p", "q", "u", "beta", "confidence", "path_q", "acceptance", "siblings", "branching"}
# the fields whose name allows only some of its members; any other named field allows them all
CHOICES = {(DraftPosition, "status"): (ACCEPTED, REJECTED, UNREACHED, AFTER_STOP),
           (TreeNode, "status"): (ROOT, ACCEPTED, REJECTED, UNTESTED),
           (RoundTrace, "draft_stop"): tuple(s for s in DraftStop if s is not DraftStop.LIMIT)}


def _read(cls, d, where: str):
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be an object (got {type(d).__name__})")
    hints = get_type_hints(cls)
    unknown = set(d) - set(hints)
    if unknown:
        raise ValueError(f"{where} has no field {sorted(unknown)[0]!r}")
    values = {}
    for f in fields(cls):
        if f.name not in d:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"{where}.{f.name} is missing")
            continue
        value = _value(d[f.name], hints[f.name], f"{where}.{f.name}", f.name)
        allowed = CHOICES.get((cls, f.name)) or _members(hints[f.name])
        if allowed is not None:
            if value not in allowed:
                shown = ", ".join(repr(a if a is None else str(a)) for a in allowed)
                raise ValueError(f"{where}.{f.name} must be one of {shown} (got {value!r})")
            value = next(a for a in allowed if a == value)  # the name itself, not its string
        values[f.name] = value
    return cls(**values)


def _members(hint) -> tuple | None:
    """The values a named field allows: its name's members, and None where it may be None."""
    args = get_args(hint) if get_origin(hint) is UnionType else (hint,)
    named = next((a for a in args if isinstance(a, type) and issubclass(a, Named)), None)
    return None if named is None else tuple(named) + (None,) * (NoneType in args)


def _value(v, hint, where: str, name: str):
    """``v`` checked against ``hint``; a named field's string is left to :func:`_read` to name."""
    origin, args = get_origin(hint), get_args(hint)
    is_named = isinstance(hint, type) and issubclass(hint, Named)
    if origin is UnionType:  # X | None
        return None if v is None and NoneType in args else _value(v, next(a for a in args if a is not NoneType),
                                                                  where, name)
    if origin is tuple:
        if not isinstance(v, (list, tuple)) or (Ellipsis not in args and len(v) != len(args)):
            raise ValueError(f"{where} must be a list{'' if Ellipsis in args else f' of {len(args)}'} (got {v!r:.40})")
        kinds = [args[0]] * len(v) if Ellipsis in args else args
        return tuple(_value(x, k, f"{where}[{i}]", name) for i, (x, k) in enumerate(zip(v, kinds)))
    if is_dataclass(hint):
        return _read(hint, v, where)
    if hint is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and v >= 0 and \
            (v <= 1 if name in UNIT else name == "ratio" or math.isfinite(v))
        if not ok:
            raise ValueError(f"{where} must be a number in {'[0, 1]' if name in UNIT else '[0, inf)'} (got {v!r:.40})")
        return float(v)
    if hint is int:
        low = -1 if name == "parent" else 0
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"{where} must be an integer >= {low} (got {v!r:.40})")
        return v
    if hint is str or is_named:
        if not isinstance(v, str):
            raise ValueError(f"{where} must be text (got {v!r:.40})")
        return v
    if not isinstance(v, hint):
        raise ValueError(f"{where} must be a {hint.__name__} (got {v!r:.40})")
    return v

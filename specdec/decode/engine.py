"""The speculative decoding loop (Leviathan et al. 2023, Section 2.3) with a per-round trace.

A :class:`Generation` is one run. Iterating it drives the engine one draft/verify round at a
time and yields a frozen :class:`~specdec.trace.RoundTrace` per round, so the CLI consumes it
all at once while the app steps through it. Every drafter proposes a token tree
(:class:`~specdec.decode.proposal.Proposal`; a chain is the tree of width one), so one round serves
them all; the verifier-only baseline is the same loop with a drafter that proposes nothing, so
both are measured with the same instrumentation. The round's trace is built in :mod:`specdec.decode.record`.

All randomness (draft sampling, the draws u, the resample) comes from one ``torch.Generator``
seeded once per run, so the same seed gives the same tokens and the same trace. Every phase is
timed with a :class:`~specdec.model.devices.Clock`, which waits for the device, so per-phase times are
true on CUDA and MPS too.

Probabilities, draws and the rule stay on the device the logits come from; the host reads back
(a device sync each) one id per drafted token, then ONE packed read for the verdict and ONE for
the trace's numbers per round (tests/model/test_device_path.py counts them).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterator

import torch

from specdec.decode.drafters import (
    Drafter,
)
from specdec.decode.pacing import Pacer
from specdec.decode.proposal import Proposal
from specdec.decode.record import Outcome, round_trace
from specdec.decode.rule import check_tree_contract, verify_tree
from specdec.decode.sampling import (
    host_read,
    numerics,
    probs_from_logits,
    raise_numerical,
    to_device,
)
from specdec.decode.tree import verifier_attention
from specdec.model.devices import Clock
from specdec.model.lm import CachedLM
from specdec.options import DecodeConfig
from specdec.trace import (
    DraftPlan,
    DraftStop,
    PhaseTimes,
    RoundTrace,
    RunStop,
    RunSummary,
    summarize,
)


def stop_ids_of(pair, cfg: DecodeConfig) -> frozenset[int]:
    """The tokens that end the output: the pair's, unless the run ignores them."""
    return frozenset() if cfg.ignore_eos else pair.stop_ids


class Generation:
    """One run of speculative decoding: ``prompt_ids`` continued by the verifier of ``pair``, with
    ``drafter`` proposing each round's tokens under ``cfg``.

    An iterator of :class:`~specdec.trace.RoundTrace`, one per draft/verify round, so that a caller
    can step through the run (the app) or drain it (``run()``, the CLI). While it runs it holds the
    output (``token_ids``, ``text``) and every round so far; ``stop_reason`` says why it ended
    (:class:`~specdec.trace.RunStop`, None while it goes on). It owns the verifier's KV cache for
    the run; the drafter owns its own. Start one from a prompt with
    :func:`specdec.decode.start.start`, which also makes the drafter by name."""

    def __init__(self, pair, prompt_ids: list[int], cfg: DecodeConfig, drafter: Drafter, tree_shape: str = "",
                 pacer: Pacer | None = None):
        self.pair, self.cfg, self.drafter = pair, cfg, drafter  # cfg: what runs, the tree shape resolved
        self.tree_shape = tree_shape  # why the tree drafter runs the shape in cfg ("" for the other drafters)
        self.pacer = pacer  # chooses each round's K or tree from past rounds and this machine's costs (None: as asked)
        self.stop_ids = stop_ids_of(pair, cfg)
        self.prompt_ids = list(prompt_ids)
        self.token_ids: list[int] = []  # generated ids (prompt excluded)
        self.text = ""
        self.rounds: list[RoundTrace] = []
        self.prefill_s = 0.0
        self.stop_reason: RunStop | None = None  # None while the run goes on
        self._cancelled = False
        self._clock = Clock(pair.device)
        self._steps = self._loop()

    def __iter__(self) -> Iterator[RoundTrace]:
        return self

    def __next__(self) -> RoundTrace:
        return next(self._steps)

    def cancel(self) -> None:
        """End the run before its next round, or between two chunks of a long prefill; safe from
        another thread. The run then ends with ``stop_reason == RunStop.CANCELLED``."""
        self._cancelled = True

    def run(self) -> Generation:
        for _ in self:
            pass
        return self

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def summary(self) -> RunSummary:
        return summarize(self.rounds, self.prefill_s)

    def _loop(self) -> Iterator[RoundTrace]:
        pair, cfg, clock = self.pair, self.cfg, self._clock
        generator = torch.Generator(device=pair.device).manual_seed(cfg.seed)  # draws happen where the logits are
        context = list(self.prompt_ids)  # prompt + every emitted token
        target = CachedLM(pair.target, pair.vocab_size)
        t_prefill = clock()
        done = target.prefill(context[:-1], lambda: self._cancelled) and \
            self.drafter.prefill(context, lambda: self._cancelled)
        self.prefill_s = clock() - t_prefill
        while done and not self._cancelled:
            room = min(cfg.max_new_tokens - len(self.token_ids), pair.max_positions - len(context))
            if room <= 0:
                self.stop_reason = (RunStop.MAX_NEW_TOKENS if len(self.token_ids) >= cfg.max_new_tokens else
                                    RunStop.CONTEXT)
                return
            limit = min(cfg.k, room - 1)
            plan = None if self.pacer is None else self.pacer.plan(limit)
            record = self._round(context, target, limit, generator, plan)
            if self.pacer is not None:
                self.pacer.update(record)
            self.rounds.append(record)
            yield record
            if self.stop_reason:
                return
        self.stop_reason = RunStop.CANCELLED

    def _round(self, context: list[int], target: CachedLM, limit: int, generator: torch.Generator,
               plan: DraftPlan | None = None) -> RoundTrace:
        """One draft/verify round of at most ``limit`` drafts deep (``plan.k``, of the plan's shape, where a
        pacer chose); ``context`` grows by the tokens it emits."""
        cfg, s, drafter, clock = self.cfg, self.cfg.sampling, self.drafter, self._clock
        asked = limit if plan is None else plan.k
        ask = plan is None or asked > 0
        t0 = clock()
        # 1. draft a token tree of depth <= K after the last context token (a chain: each node one child),
        #    shallower when the round could overrun the budget or the context, of the shape the pacer chose;
        #    nothing when it says no draft pays (the drafter is not asked: its cache catches up in its next forward)
        if ask and plan is not None:
            drafter.reshape(plan.width, plan.asked)
        proposal = (drafter.propose(context, asked, s, generator, cfg.confidence, cfg.draft_noise) if ask
                    else Proposal.chain(context[-1], [], torch.zeros(1, self.pair.vocab_size, device=self.pair.device),
                                        stopped=DraftStop.LIMIT))
        t1 = clock()
        # 2. ONE verifier forward over the root and the N nodes, each seeing the context and its ancestors:
        #    for a chain, the causal mask of the plain forward
        cached, nodes = len(target), list(proposal.tokens)  # the verifier holds the context but the root
        logits = (target.forward(nodes, keep=len(nodes)) if proposal.is_chain else
                  target.forward_tree(nodes, verifier_attention(proposal.parents, cached)))  # (N+1, V)
        t_fwd = clock()
        target_probs = probs_from_logits(logits, s, check=False)                  # (N+1, V)
        target_len = len(target)
        t2 = clock()
        # 3. accept with the pure rule: the accepted path, then a resample or the bonus
        tokens = to_device([proposal.tokens], target_probs.device)               # (1, N+1)
        v = verify_tree(proposal.parents, tokens, proposal.probs[None], target_probs[None], generator,
                        greedy=s.greedy, keep_residuals=proposal.from_tree_drafter, check=False,
                        one_hot_nodes=proposal.one_hot_nodes)
        # ONE host read per verification: the verdict, the drafter's contract, the NaN test of p
        n_acc, nxt, kept, *path, nan, bad = host_read(v.n_accepted, v.next_token, v.contract, v.path[0],
                                                      numerics(logits, target_probs))
        raise_numerical(nan, bad, s)
        if not kept:
            check_tree_contract(proposal.parents, tokens, proposal.probs[None])
        path, nxt = [int(j) for j in path[:int(n_acc)]], int(nxt)
        t3 = clock()
        # 4. commit the path's tokens and the next one, cut after the first stop token (which may be a draft)
        new = self._emit([proposal.tokens[j] for j in path] + [nxt], context)
        # 5. both caches keep the accepted path's entries, then roll back to the invariant
        draft_len = None if drafter.cache is None else len(drafter.cache)
        if path != list(range(1, len(path) + 1)):  # off the first-child line: move its entries into place
            target.keep(cached + 1, [cached + j for j in path])
        if ask:
            drafter.keep_path(path)
        target.rollback(context)
        drafter.rollback(context)
        t4 = clock()
        # 6. record the round
        outcome = Outcome(tuple(path), nxt, tuple(new), self._append_text(new))
        stopped = proposal.stopped
        if stopped == DraftStop.LIMIT:  # the depth it was asked for: K, or fewer where the budget or the pacer cut it
            stopped = DraftStop.K if asked == cfg.k else DraftStop.BUDGET if asked == limit else DraftStop.PACED
        record = round_trace(
            index=len(self.rounds), context_len=len(context) - len(new), proposal=proposal,
            target_probs=target_probs, verdict=v, outcome=outcome, target_cache=(target_len, len(target)),
            draft_cache=None if draft_len is None else (draft_len, len(drafter.cache)),
            draft_stop=stopped,
            times=PhaseTimes(), elapsed=0.0, token_text=self.pair.token_text, greedy=s.greedy)
        t5 = clock()
        times = PhaseTimes(draft=t1 - t0, verify=t2 - t1, accept=t3 - t2, rollback=t4 - t3, other=t5 - t4,
                           forward=proposal.forward_s + (t_fwd - t1))
        start_of_round = self.rounds[-1].elapsed if self.rounds else self.prefill_s
        return replace(record, times=times, elapsed=start_of_round + times.total, plan=plan)

    def _emit(self, new: list[int], context: list[int]) -> list[int]:
        """``new`` cut after its first stop token, appended to ``context``; a stop ends the run."""
        if not new:  # every round emits at least the verifier's next token; a round without one would loop forever
            raise RuntimeError("a round emitted no token: the verifier's next token is always committed")
        stop_at = next((i for i, tok in enumerate(new) if tok in self.stop_ids), None)
        if stop_at is not None:
            new = new[: stop_at + 1]
            self.stop_reason = RunStop.EOS
        context += new
        return new

    def _append_text(self, new: list[int]) -> tuple[str, ...]:
        """Output text of each new id, such that the pieces of all rounds join to ``self.text``.
        A token ending inside a multi-byte character gets "" and the next one carries the character."""
        pieces = []
        for tok in new:
            self.token_ids.append(tok)
            text = self.pair.decode(self.token_ids)
            if text.endswith("\ufffd"):
                pieces.append("")
                continue
            pieces.append(text[len(self.text):])
            self.text = text
        return tuple(pieces)

"""The speculative decoding loop (Leviathan et al. 2023, Section 2.3) with a per-round trace.

A :class:`Generation` is one run. Iterating it drives the engine one draft/verify round at a
time and yields a frozen :class:`~specdec.trace.RoundTrace` per round, so the CLI consumes it
all at once while the app steps through it. The verifier-only baseline is the same loop with a
drafter that proposes nothing, so both are measured with the same instrumentation.

All randomness (draft sampling, the draws u, the resample) comes from one ``torch.Generator``
seeded once per run, so the same seed gives the same tokens and the same trace. Every phase is
timed with a :class:`~specdec.devices.Clock`, which waits for the device, so per-phase times are
true on CUDA and MPS too.

Probabilities, draws and the rule stay on the device the logits come from; the host reads back
(a device sync each) one id per drafted token, then ONE packed read for the verdict and ONE for
the trace's numbers per round (tests/test_device_path.py counts them).
"""
from __future__ import annotations

import time
from typing import Iterator

import torch

from .cache import CachedLM
from .config import ConfigError, DecodeConfig
from .devices import Clock
from .drafters import LIMIT, Drafter, HybridDrafter, LookupDrafter, ModelDrafter, NoDrafter
from .rule import check_contract, verify, verify_tree
from .sampling import host_read, numerics, probs_from_logits, raise_numerical, to_device
from .settings import DRAFTERS
from .trace import (ACCEPTED, AFTER_STOP, BONUS, PLAIN, REJECTED, RESAMPLED, ROOT, UNREACHED, UNTESTED, Candidate,
                    DraftPosition, TESTED, PhaseTimes, RoundTrace, RunSummary, TokenProb, TreeNode, TreeRound,
                    summarize)
from .tree import BUDGET, TreeDrafter, depths, require_lean, verifier_attention

TOP_N = 8  # entries of p, q and the residual kept per position: enough for a bar chart
HYBRID_MIN_NGRAM = 3  # measured: 3-grams 11.1 tok/s, 2-grams 9.9, 1-grams 10.5 on held-out code (levers)


def make_drafter(kind: str, pair, clock: Clock | None = None, hidden: tuple[bool, ...] = (),
                 stop_ids: frozenset[int] | None = None, tree: tuple[int, int] = (0, 0),
                 cfg: DecodeConfig | None = None) -> Drafter:
    """``model`` (the pair's draft model), ``hybrid`` (prompt lookup where it matches, the model
    elsewhere), ``lookup`` (prompt lookup), ``tree`` (the draft model drafting token trees of
    ``tree`` = (width, nodes), 0 for the machine's choice for the run ``cfg``: see
    :mod:`specdec.tree_shape`) or ``none`` (verifier only).
    ``hidden``: the prompt positions prompt lookup must not read (the chat template's markup);
    ``stop_ids``: after drafting one of these the model drafter stops (default: the pair's)."""
    if kind == "none":
        return NoDrafter(pair.vocab_size, pair.device)
    if kind == "lookup":
        return LookupDrafter(pair.vocab_size, hidden=hidden, device=pair.device)
    if kind == "tree":
        from .tree_shape import default_shape
        require_lean(pair)
        cfg = cfg or DecodeConfig()
        width, nodes, _ = default_shape(pair, cfg.k, cfg.sampling) if 0 in tree else (*tree, "")
        width, nodes = tree[0] or width, tree[1] or nodes
        if width > 1:
            return TreeDrafter(pair.draft, pair.vocab_size, clock or Clock(pair.device), width, nodes,
                               pair.stop_ids if stop_ids is None else stop_ids)
        kind = "model"  # width 1 is the chain: the chain drafter drafts it (N does not apply)
    if kind in ("model", "hybrid"):
        if pair.draft is None:
            raise ConfigError(f"drafter {kind!r} needs a draft model; load one or use drafter 'lookup'", "drafter")
        model = ModelDrafter(pair.draft, pair.vocab_size, clock or Clock(pair.device),
                             pair.stop_ids if stop_ids is None else stop_ids)
        # a 1- or 2-token match is weak evidence of copying: the hybrid copies after a 3-gram only
        lookup = LookupDrafter(pair.vocab_size, min_ngram=HYBRID_MIN_NGRAM, hidden=hidden, device=pair.device)
        return model if kind == "model" else HybridDrafter(lookup, model)
    raise ConfigError(f"drafter must be one of {', '.join(DRAFTERS)} (got {kind!r})", "drafter")


def _stop_ids(pair, cfg: DecodeConfig) -> frozenset[int]:
    """The tokens that end the output: the pair's, unless the run ignores them."""
    return frozenset() if cfg.ignore_eos else pair.stop_ids


class Generation:
    def __init__(self, pair, prompt_ids: list[int], cfg: DecodeConfig, drafter: Drafter):
        self.pair, self.cfg, self.drafter = pair, cfg, drafter
        self.stop_ids = _stop_ids(pair, cfg)
        self.prompt_ids = list(prompt_ids)
        self.token_ids: list[int] = []  # generated ids (prompt excluded)
        self.text = ""
        self.rounds: list[RoundTrace] = []
        self.prefill_s = 0.0
        self.waited_s = 0.0  # time spent waiting for other users of the shared models (not in any phase)
        self.stop_reason: str | None = None  # eos | max_new_tokens | context | cancelled
        self._cancelled = False
        self._waiting_since: float | None = None
        self._clock = Clock(pair.device)
        self._steps = self._loop()

    @classmethod
    def from_prompt(cls, pair, prompt: str, cfg: DecodeConfig, drafter: str = "model", chat: bool = True
                    ) -> Generation:
        """Validate and encode the prompt (through the chat template unless ``chat`` is False)."""
        ids, hidden = pair.encode_marked(prompt, chat=chat)
        return cls(pair, ids, cfg, make_drafter(drafter, pair, hidden=hidden, stop_ids=_stop_ids(pair, cfg),
                                                tree=(cfg.tree_width, cfg.tree_nodes), cfg=cfg))

    def __iter__(self) -> Iterator[RoundTrace]:
        return self

    def __next__(self) -> RoundTrace:
        t = self._waiting_since = time.perf_counter()
        with self.pair.lock:  # the models are shared between sessions: one round at a time
            self._waiting_since = None
            self.waited_s += time.perf_counter() - t
            return next(self._steps)

    @property
    def waiting(self) -> bool:
        """Blocked for a while (over 0.1 s) on another user of the shared models; safe from another thread."""
        since = self._waiting_since
        return since is not None and time.perf_counter() - since > 0.1

    def cancel(self) -> None:
        """End the run before its next round, or between two chunks of a long prefill; safe from
        another thread. The run then ends with ``stop_reason == "cancelled"``."""
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
        pair, cfg, drafter, s, clock = self.pair, self.cfg, self.drafter, self.cfg.sampling, self._clock
        generator = torch.Generator(device=pair.device).manual_seed(cfg.seed)  # draws happen where the logits are
        context = list(self.prompt_ids)  # prompt + every emitted token
        target = CachedLM(pair.target, pair.vocab_size)
        t_prefill = clock()
        done = target.prefill(context[:-1], lambda: self._cancelled) and drafter.prefill(context, lambda: self._cancelled)
        self.prefill_s = clock() - t_prefill
        if not done:
            self.stop_reason = "cancelled"
            return

        while True:
            if self._cancelled:
                self.stop_reason = "cancelled"
                return
            room = min(cfg.max_new_tokens - len(self.token_ids), pair.max_positions - len(context))
            if room <= 0:
                self.stop_reason = "max_new_tokens" if len(self.token_ids) >= cfg.max_new_tokens else "context"
                return
            asked = min(cfg.k, room - 1)
            if isinstance(drafter, TreeDrafter):
                record = self._tree_round(context, target, asked, generator)
                self.rounds.append(record)
                yield record
                if self.stop_reason:
                    return
                continue
            t0 = clock()
            # 1. draft up to K tokens (fewer when the round could overrun the budget or the context)
            proposal = drafter.propose(context, asked, s, generator, cfg.confidence, cfg.draft_noise)
            drafted = proposal.tokens
            k = len(drafted)
            t1 = clock()
            # 2. ONE verifier forward over K+1 positions: the last emitted token, then the K drafts
            logits = target.forward(context[len(target):] + drafted, keep=k + 1)   # (K+1, V)
            t_fwd = clock()
            target_probs = probs_from_logits(logits, s, check=False)                # (K+1, V)
            target_len = len(target)
            t2 = clock()
            # 3. accept/reject with the pure rule: keep a leading run, then resample or take the bonus
            draft_tokens = to_device([drafted], target_probs.device).view(1, k)     # (1, K)
            v = verify(draft_tokens, proposal.probs[None], target_probs[None], generator, greedy=s.greedy, check=False)
            # ONE host read per verification: the verdict, the drafter's contract, the NaN test of p
            n_acc, nxt, kept, nan, bad = host_read(v.n_accepted, v.next_token, v.contract,
                                                   numerics(logits, target_probs))
            raise_numerical(nan, bad, s)
            if not kept:
                check_contract(draft_tokens, proposal.probs[None])
            n_acc, nxt = int(n_acc), int(nxt)
            new = drafted[:n_acc] + [nxt]
            t3 = clock()
            # 4. emit, cut after the first stop token (which may be one of the kept drafts)
            new = self._emit(new, context)
            # 5. roll both caches back to the invariant: every context token but the last
            draft_len = len(drafter.cache) if drafter.cache is not None else None
            target.rollback(context)
            drafter.rollback(context)
            t4 = clock()
            # 6. record the round
            pieces = self._append_text(new)
            record = self._record(proposal, target_probs, v, n_acc, nxt, new, pieces, len(context) - len(new),
                                  (target_len, len(target)),
                                  None if draft_len is None else (draft_len, len(drafter.cache)))
            record["draft_stop"] = (proposal.stopped if proposal.stopped != LIMIT else
                                    "k" if asked == cfg.k else "budget")
            record["drafted_by"] = proposal.source
            t5 = clock()
            times = PhaseTimes(draft=t1 - t0, verify=t2 - t1, accept=t3 - t2, rollback=t4 - t3,
                               other=t5 - t4, forward=proposal.forward_s + (t_fwd - t1))
            start_of_round = self.rounds[-1].elapsed if self.rounds else self.prefill_s
            record = RoundTrace(**{**record, "times": times, "elapsed": start_of_round + times.total})
            self.rounds.append(record)
            yield record
            if self.stop_reason:
                return

    def _emit(self, new: list[int], context: list[int]) -> list[int]:
        """``new`` cut after its first stop token, appended to ``context``; a stop ends the run."""
        stop_at = next((i for i, tok in enumerate(new) if tok in self.stop_ids), None)
        if stop_at is not None:
            new = new[: stop_at + 1]
            self.stop_reason = "eos"
        context += new
        return new

    def _tree_round(self, context: list[int], target: CachedLM, asked: int, generator) -> RoundTrace:
        """One round with a token tree (:mod:`specdec.tree`): the same steps as a chain's."""
        cfg, drafter, s, clock = self.cfg, self.drafter, self.cfg.sampling, self._clock
        t0 = clock()
        # 1. draft a token tree of depth <= K (less when the round could overrun the budget or the context)
        tree = drafter.propose(context, asked, s, generator, cfg.confidence, cfg.draft_noise)
        t1 = clock()
        # 2. ONE verifier forward over the root and every node, each seeing the context and its ancestors
        cached = len(target)                                                        # the context but the root
        logits = target.forward_tree(list(tree.tokens), verifier_attention(tree.parents, cached))  # (N+1, V)
        t_fwd = clock()
        target_probs = probs_from_logits(logits, s, check=False)                    # (N+1, V)
        target_len = len(target)
        t2 = clock()
        # 3. walk the tree with the rule: the accepted path, then a resample or the bonus
        v = verify_tree(tree.parents, to_device([tree.tokens], target_probs.device), tree.probs[None],
                        target_probs[None], generator, greedy=s.greedy, keep_residuals=True)
        # ONE host read of the verdict and the NaN test of p
        n_acc, nxt, last, *path, nan, bad = host_read(v.n_accepted, v.next_token, v.last, v.path[0],
                                                      numerics(logits, target_probs))
        raise_numerical(nan, bad, s)
        path, nxt, last = [int(j) for j in path[:int(n_acc)]], int(nxt), int(last)
        new = [tree.tokens[j] for j in path] + [nxt]
        t3 = clock()
        # 4. emit, cut after the first stop token (an accepted stop-token node is a leaf)
        new = self._emit(new, context)
        # 5. both caches keep the accepted path's entries, then roll back to the invariant
        draft_len = len(drafter.cache)
        target.keep(cached + 1, [cached + j for j in path])
        drafter.keep_path(path)
        target.rollback(context)
        drafter.rollback(context)
        t4 = clock()
        # 6. record the round
        pieces = self._append_text(new)
        record = self._tree_record(tree, target_probs, v, path, nxt, last, new, pieces, len(context) - len(new),
                                   (target_len, len(target)), (draft_len, len(drafter.cache)))
        record["draft_stop"] = ("tree_budget" if tree.stopped == BUDGET else tree.stopped if tree.stopped != LIMIT
                                else "k" if asked == cfg.k else "budget")
        t5 = clock()
        times = PhaseTimes(draft=t1 - t0, verify=t2 - t1, accept=t3 - t2, rollback=t4 - t3,
                           other=t5 - t4, forward=tree.forward_s + (t_fwd - t1))
        start_of_round = self.rounds[-1].elapsed if self.rounds else self.prefill_s
        return RoundTrace(**{**record, "times": times, "elapsed": start_of_round + times.total})

    def _tree_record(self, tree, target_probs, v, path, nxt, last, new, pieces, context_len, target_cache,
                     draft_cache) -> dict:
        """A tree round's fields but its times. ``positions`` are the chain view of the round (the
        accepted path, then the first rejected child of the node the walk stopped at), so the
        summaries and the colour-coded output read a tree round as a chain; ``tree`` has every node."""
        q, p, n = tree.probs, target_probs, min(TOP_N, target_probs.shape[-1])     # (N+1, V) each
        N, depth = tree.n, depths(tree.parents)
        emitted_drafts = min(len(path), len(new))
        stopped_in_drafts = len(new) <= len(path)
        first_rejected = next((j for j in range(1, N + 1) if tree.parents[j] == last), None)
        shown = path + ([first_rejected] if first_rejected is not None and not stopped_in_drafts else [])
        # ONE host read for the trace: every node's q(x), p(x) at its parent, the verdict's per-node numbers
        # and residual tops, the shown positions' numbers (_position_numbers) and the final token's top
        parent, token = to_device(tree.parents[1:], p.device), to_device(tree.tokens[1:], p.device)  # (N,) each
        rows = to_device([tree.parents[j] for j in shown], p.device)                 # (S,) shown positions' parents
        packed = _position_numbers(p[rows], q[rows], to_device([tree.tokens[j] for j in shown], p.device), n)
        take = _reader(host_read(q[parent, token], p[parent, token], v.ratios[0], v.uniforms[0], v.tested[0],
                                 v.accepted[0], *v.residuals[0, 1:].topk(n, dim=-1), packed,
                                 *v.next_dist[0].topk(n), v.next_dist[0, nxt]))
        q_x, p_x = take(N), take(N)
        ratios, uniforms, tested, accepted = take(N + 1), take(N + 1), take(N + 1), take(N + 1)
        res_vals, res_ids = take(N * n), take(N * n)
        numbers = [take(packed.shape[-1]) for _ in shown]
        nxt_top, nxt_prob = (take(n), take(n)), take(1)[0]
        nums = lambda x: None if x != x else x  # noqa: E731  NaN (untested) -> None
        nodes = [TreeNode(-1, tree.tokens[0], self.pair.token_text(tree.tokens[0]), 0, 1.0, 1.0, 1.0, ROOT, None, None)]
        for j in range(1, N + 1):
            a, tok = tree.parents[j], tree.tokens[j]
            status = ACCEPTED if accepted[j] else REJECTED if tested[j] else UNTESTED
            top = slice((j - 1) * n, j * n)  # node j's block of the residual tops
            residual_top = self._top(res_vals[top], res_ids[top]) if status == REJECTED else ()
            nodes.append(TreeNode(a, tok, self.pair.token_text(tok), depth[j], q_x[j - 1], tree.path_q[j], p_x[j - 1],
                                  status, nums(ratios[j]), nums(uniforms[j]), residual_top))
        positions = []
        for i, (j, row) in enumerate(zip(shown, numbers)):
            status = ACCEPTED if i < emitted_drafts else AFTER_STOP if stopped_in_drafts else REJECTED
            positions.append(DraftPosition(
                token_id=tree.tokens[j], text=nodes[j].text, q=nodes[j].q, p=nodes[j].p, ratio=nodes[j].ratio,
                u=nodes[j].u, beta=row[2], status=status, candidates=self._candidates(row, tree.tokens[j], n),
                confidence=None))
        if stopped_in_drafts:
            kind, token, top = None, None, ()
        else:
            kind = PLAIN if N == 0 else RESAMPLED if first_rejected is not None else BONUS
            token, top = TokenProb(nxt, self.pair.token_text(nxt), nxt_prob), self._top(*nxt_top)
        return dict(index=len(self.rounds), context_len=context_len, positions=tuple(positions),
                    n_accepted=emitted_drafts, rejected_at=len(path) if kind == RESAMPLED else None,
                    next_kind=kind, next_token=token, next_top=top, emitted=tuple(new), pieces=pieces,
                    target_cache=target_cache, draft_cache=draft_cache, drafted_by="",
                    tree=TreeRound(tuple(nodes), tree.width, tree.budget, tuple(path)))

    def _record(self, proposal, target_probs, v, n_acc: int, nxt: int, new: list[int], pieces, context_len,
                target_cache, draft_cache) -> dict:
        """The round's fields but its times. A stop token among the kept drafts ends the round
        there: only the drafts up to it count as accepted, and no next token follows."""
        k, n = len(proposal.tokens), min(TOP_N, target_probs.shape[-1])
        emitted_drafts = min(n_acc, len(new))
        stopped_in_drafts = len(new) <= n_acc
        # ONE host read for the trace: the K positions' numbers (_position_numbers), the ratios and the
        # draws, and the top of the distribution the next token was drawn from
        packed = _position_numbers(target_probs[:k], proposal.probs, to_device(proposal.tokens, target_probs.device), n)
        take = _reader(host_read(packed, v.ratios[0], v.uniforms[0], *v.next_dist[0].topk(n), v.next_dist[0, nxt]))
        numbers, ratios, uniforms = [take(packed.shape[-1]) for _ in range(k)], take(k), take(k)
        nxt_top, nxt_prob = (take(n), take(n)), take(1)[0]
        if stopped_in_drafts:
            kind, token, top = None, None, ()
        else:
            kind = PLAIN if k == 0 else RESAMPLED if n_acc < k else BONUS
            token, top = TokenProb(nxt, self.pair.token_text(nxt), nxt_prob), self._top(*nxt_top)
        positions = []
        for i, (tok, row) in enumerate(zip(proposal.tokens, numbers)):
            status = (ACCEPTED if i < emitted_drafts else AFTER_STOP if stopped_in_drafts
                      else REJECTED if i == n_acc else UNREACHED)
            tested = status in TESTED  # the rule read u and p/q here; elsewhere they decide nothing
            positions.append(DraftPosition(
                token_id=tok, text=self.pair.token_text(tok), q=row[1], p=row[0],
                ratio=ratios[i] if tested else None, u=uniforms[i] if tested else None,
                beta=row[2], status=status, candidates=self._candidates(row, tok, n),
                confidence=proposal.confidence[i] if i < len(proposal.confidence) else None))
        return dict(index=len(self.rounds), context_len=context_len, positions=tuple(positions),
                    n_accepted=emitted_drafts, rejected_at=n_acc if n_acc < k and not stopped_in_drafts else None,
                    next_kind=kind,
                    next_token=token, next_top=top, emitted=tuple(new), pieces=pieces, target_cache=target_cache,
                    draft_cache=draft_cache)

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

    def _candidates(self, numbers: list[float], drafted: int, n: int) -> tuple[Candidate, ...]:
        """The top of p and the top of q (with mass) and the drafted token, each with both
        probabilities, largest first: one shared token axis for the chart of this position.
        ``numbers``: the position's row of :func:`_position_numbers`, read on the host."""
        p_x, q_x, _, p_vals, p_ids, q_at_p, q_vals, q_ids, p_at_q = *numbers[:3], *(
            numbers[3 + j * n:3 + (j + 1) * n] for j in range(6))
        p_ids, q_ids = [int(i) for i in p_ids], [int(i) for i in q_ids]
        p = {drafted: p_x, **dict(zip(q_ids, p_at_q)), **dict(zip(p_ids, p_vals))}
        q = {drafted: q_x, **dict(zip(p_ids, q_at_p)), **dict(zip(q_ids, q_vals))}
        ids = {drafted}
        for vals, top in ((p_vals, p_ids), (q_vals, q_ids)):
            ids |= {i for x, i in zip(vals, top) if x > 0}
        ranked = sorted(ids, key=lambda i: -max(p[i], q[i]))
        return tuple(Candidate(i, self.pair.token_text(i), p[i], q[i]) for i in ranked)

    def _top(self, vals: list[float], ids: list[float]) -> tuple[TokenProb, ...]:
        """A distribution's top entries with mass, from its topk values and ids read on the host."""
        return tuple(TokenProb(int(i), self.pair.token_text(int(i)), x) for x, i in zip(vals, ids) if x > 0)


def _reader(numbers: list[float]):
    """``take(m)``: the next m numbers of a host read, in the order they were packed."""
    it = iter(numbers)
    return lambda m: [next(it) for _ in range(m)]


def _position_numbers(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """(R, V) p and q at R drafted positions, (R,) the drafted tokens -> (R, 3 + 6n) on the device, for
    the trace's one host read: p(x), q(x), beta = sum min(p, q), then p's top n (values, ids, q there)
    and q's top n (values, ids, p there). Ids are exact in float32 below 2^24."""
    x = tokens[:, None]                                                           # (R, 1)
    both = torch.minimum(p, q)                                                    # (R, V)
    # one sum per row, as one position at a time summed it: a batched sum rounds differently on a large V
    beta = torch.stack([row.sum() for row in both]) if len(both) else both.new_zeros(0)  # (R,)
    p_vals, p_ids = p.topk(n, dim=-1)                                             # (R, n) each
    q_vals, q_ids = q.topk(n, dim=-1)                                             # (R, n) each
    return torch.cat([p.gather(-1, x), q.gather(-1, x), beta[:, None], p_vals, p_ids.float(), q.gather(-1, p_ids),
                      q_vals, q_ids.float(), p.gather(-1, q_ids)], -1)           # (R, 3 + 6n)

"""The speculative sampling rule (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Alg. 2).

Letters as in Leviathan et al.: **p is the verifier (target)**, **q is the draft**. (Chen et al.
and gpt-fast swap them.) A drafted token x at position i is kept with probability
min(1, p_i(x) / q_i(x)); the first rejected one is replaced by a sample from
norm(max(0, p_i - q_i)); when all K are kept a bonus token is sampled from p_{K+1}. The emitted
tokens are then distributed exactly as p.

This module is pure: no model, no cache, no tokenizer. It is batched over B independent trials so
that the losslessness test can run 10^5 rounds in one call; the engine calls it with B = 1.

Shapes: B trials, K drafted tokens, V vocabulary entries.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import draw


class DrafterContractError(ValueError):
    """The drafter broke its contract: a drafted token must have q(x) > 0 under the q it returned."""


@dataclass(frozen=True)
class Verdict:
    ratios: torch.Tensor      # (B, K)  p(x) / q(x) at each drafted token
    uniforms: torch.Tensor    # (B, K)  the draws u in (0, 1]; token i is kept iff u_i <= ratio_i
    n_accepted: torch.Tensor  # (B,)    length of the leading run of kept tokens, 0..K
    next_dist: torch.Tensor   # (B, V)  residual norm(max(0, p - q)) at the rejection, or p for the bonus
    next_token: torch.Tensor  # (B,)    sampled from next_dist (argmax when greedy)


def verify(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
           generator: torch.Generator, greedy: bool = False) -> Verdict:
    B, K = draft_tokens.shape
    V = target_probs.shape[-1]
    # Explicit checks, not asserts: they must hold under ``python -O`` too.
    if tuple(draft_probs.shape) != (B, K, V):
        raise ValueError(f"q must be (B, K, V) = {(B, K, V)}, got {tuple(draft_probs.shape)}")
    if tuple(target_probs.shape) != (B, K + 1, V):
        raise ValueError(f"p must be (B, K+1, V) = {(B, K + 1, V)}, got {tuple(target_probs.shape)}")

    idx = draft_tokens.unsqueeze(-1)                                  # (B, K, 1)
    q_x = draft_probs.gather(-1, idx).squeeze(-1)                     # (B, K)
    p_x = target_probs[:, :K].gather(-1, idx).squeeze(-1)             # (B, K)
    # q(x) > 0 is the drafter's contract: it returns exactly the distribution it sampled from.
    # Broken, p(x) / 0 = inf would accept the token always and the output would no longer be p.
    if not bool((q_x > 0).all()):
        b, i = (q_x <= 0).nonzero()[0].tolist()
        raise DrafterContractError(f"drafted token {int(draft_tokens[b, i])} at position {i} has q(x) = "
                                   f"{float(q_x[b, i])}: the drafter did not sample from the q it returned")
    ratios = p_x / q_x                                                # (B, K)

    # u in (0, 1] rather than [0, 1): then u <= ratio accepts with probability exactly min(1, ratio),
    # including ratio == 0 (never) and ratio == 1 (always), which makes temperature 0 exact.
    uniforms = 1.0 - torch.rand((B, K), generator=generator)          # (B, K)
    kept = (uniforms <= ratios).long()                                # (B, K)
    n_accepted = kept.cumprod(-1).sum(-1)                             # (B,)

    # Padding q with a zero row at position K turns "bonus from p" into the same residual formula.
    q_pad = torch.cat([draft_probs, draft_probs.new_zeros(B, 1, V)], dim=1)  # (B, K+1, V)
    rows = torch.arange(B)
    p_next = target_probs[rows, n_accepted]                           # (B, V)
    residual = (p_next - q_pad[rows, n_accepted]).clamp_min(0)        # (B, V)
    mass = residual.sum(-1, keepdim=True)                             # (B, 1)
    # A rejection implies p(x) < q(x), hence mass > 0 mathematically; only rounding can zero it.
    next_dist = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_next)  # (B, V)
    if greedy:
        next_token = next_dist.argmax(-1)
    else:
        next_token = draw(next_dist, generator)
    return Verdict(ratios, uniforms, n_accepted, next_dist, next_token)

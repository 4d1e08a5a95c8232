"""Reference outputs and a scripted drafter for greedy tests: transformers' own greedy decoding,
and a drafter wrong exactly where a test says."""
from __future__ import annotations

import torch

from helpers import tiny
from specdec import DecodeConfig, Drafter, Generation, Proposal, SamplingConfig

N = 40  # new tokens a greedy reference makes unless told


def hf_greedy(model, prompt, n=N, eos=tiny.EOS):
    """transformers' ``generate(do_sample=False)``: the reference every greedy test compares with."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                         pad_token_id=0)
    return out[0, len(prompt):].tolist()


class ScriptedDrafter(Drafter):
    """Proposes the verifier's greedy continuation, except at chosen output positions where it
    proposes a wrong token. One-hot q, like any deterministic drafter."""

    def __init__(self, truth: list[int], wrong_at: set[int], prompt_len: int, vocab: int):
        self.truth, self.wrong_at, self.prompt_len, self.vocab = truth, wrong_at, prompt_len, vocab

    def propose(self, committed, k, sampling, generator, confidence=0.0, noise=0.0):
        start = len(committed) - self.prompt_len
        tokens = [(self.truth[j] + 1) % (self.vocab - 1) if j in self.wrong_at else self.truth[j]
                  for j in range(start, min(start + k, len(self.truth)))]
        probs = torch.zeros(len(tokens) + 1, self.vocab)  # row K: the last token is a leaf
        probs[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 1.0
        return Proposal.chain(committed[-1], tokens, probs)




def count_definitions_run() -> Generation:
    """The run the count definitions are stated on, scripted at T = 0 with K = 4: round 1 keeps 2 of
    4 (rejects the 3rd, the 4th untested); round 2 keeps all 4 and a bonus; then a stop token kept in
    the middle of round 3's drafts ends the output."""
    target = tiny.model(7, scale=8)
    pair = tiny.pair(target, None)
    pair.stop_ids = frozenset()
    prompt = tiny.prompt_ids(seed=7)
    truth = hf_greedy(target, prompt, eos=None)
    pair.stop_ids = frozenset({truth[9]})  # the 10th token stops the output: round 3 starts at output 8
    drafter = ScriptedDrafter(truth, {2}, len(prompt), pair.vocab_size)
    cfg = DecodeConfig(max_new_tokens=30, k=4, confidence=0.0, sampling=SamplingConfig(0.0))
    return Generation(pair, prompt, cfg, drafter).run()

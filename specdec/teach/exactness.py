"""Where greedy speculative output leaves greedy verifier-only output, and whether it may.

At temperature 0 speculative decoding must reproduce the verifier's greedy tokens. It does so
bit for bit where the verifier is batch-invariant (the CPU's int8 and float32 layers; a GPU's
padded verifier, :mod:`specdec.model.qwen2`). Where a configuration is not (a token tree of more rows
than a GPU verifier is padded to, a model on transformers' forward on a GPU), a forward over
several rows may round differently from a one-row forward, and at a **near-tie** of the
verifier's two best tokens that can flip the argmax: the outputs then part, and both are the
verifier's greedy output up to rounding. Anywhere else a difference is a bug.

:func:`explain` says which it is, never silently: it reruns the verifier alone on the common
prefix and compares the gap between its two largest logits there with the rounding of the
precision its layers compute in:

    tolerance = TIE_ROUNDINGS x unit roundoff x max(|top logit|, 1)

(unit roundoff: 2^-24 float32, 2^-8 bfloat16, 2^-11 float16, 2^-8 for int8, whose activations
are rounded to 1/127 of their largest value, 2^-4 for int4).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from specdec.model.lm import CachedLM
from specdec.teach.render import first_difference

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "int8": 2.0 ** -8,
                 "int4": 2.0 ** -4}
TIE_ROUNDINGS = 8  # a logit is a sum of E products, each rounded: allow a few roundings of the largest


@dataclass(frozen=True)
class Difference:
    index: int                 # the first token (0-based, after the prompt) where the outputs part
    baseline: int | None       # the verifier-only token there (None: that output had ended)
    speculative: int | None    # the speculative run's token there
    gap: float                 # top-1 minus top-2 logit of the verifier alone at that position
    tolerance: float           # the rounding the gap is compared with (module docstring)
    precision: str

    @property
    def near_tie(self) -> bool:
        return self.gap <= self.tolerance

    def to_dict(self) -> dict:
        return {**asdict(self), "near_tie": self.near_tie}

    def sentence(self, token_text=str) -> str:
        """One line for the CLI and the app."""
        said = lambda t: "the end" if t is None else repr(token_text(t))  # noqa: E731
        where = (f"the outputs part at token {self.index + 1} (verifier only {said(self.baseline)}, speculative "
                 f"{said(self.speculative)}): the verifier's two best logits there are {self.gap:.3g} apart")
        if self.near_tie:
            return (f"{where}, within {self.precision}'s rounding tolerance of {self.tolerance:.3g}: a near-tie, "
                    "where a forward over several rows and a one-row forward may round to different argmaxes")
        return (f"{where}, beyond {self.precision}'s rounding tolerance of {self.tolerance:.3g}: not a near-tie, "
                "so this is a bug in the engine; please report it with the trace")


def explain(pair, prompt_ids: list[int], baseline: list[int], speculative: list[int]) -> Difference | None:
    """None when the outputs are equal; else where they part and the verifier's top-2 gap there."""
    i = first_difference(baseline, speculative)
    if i is None:
        return None
    context = list(prompt_ids) + list(baseline[:i])
    with pair.lock:
        lm = CachedLM(pair.target, pair.vocab_size)
        lm.prefill(context[:-1])
        top = lm.forward(context[-1:], keep=1)[0].float().topk(2).values.tolist()
    name = pair.precision.name
    tolerance = TIE_ROUNDINGS * UNIT_ROUNDOFF.get(name, 2.0 ** -8) * max(abs(top[0]), 1.0)
    at = lambda ids: ids[i] if i < len(ids) else None  # noqa: E731
    return Difference(i, at(baseline), at(speculative), top[0] - top[1], tolerance, name)


def how_exact(pair) -> str:
    """One line: how this pair's verifier gives greedy output equal to verifier-only, and where not."""
    from specdec.model.kernels import PackedLinear
    from specdec.model.qwen2 import LeanQwen2
    v = pair.target
    if not isinstance(v, LeanQwen2):
        return ("transformers' forward, not batch-invariant: at T = 0 speculative output can part from verifier-only "
                "at a near-tie of the verifier's logits; Compare says where and whether it was one")
    layers = [m for m in v.modules() if isinstance(m, PackedLinear)]
    if not v.static and all(m.invariant for m in layers):
        return (f"bit for bit: batch-invariant {pair.precision.label} layers (per-row activation scales, exact integer "
                "sums, float sums in a fixed order) and attention row by row, so a K+1-row verification computes "
                "what K+1 one-token forwards compute")
    if not v.static:
        return (f"up to rounding: {pair.precision.label} GEMMs may sum a K+1-row verification in another order than "
                "a one-row forward; Compare says where outputs part and whether at a near-tie")
    graphs = " as CUDA graphs" if v.graphs else ""
    return (f"bit for bit up to K = {v.pad_rows - 1} (trees up to {v.pad_rows - 1} nodes): every verifier forward "
            f"runs padded to {v.pad_rows} rows{graphs}, so verification and verifier-only decoding run the same "
            "kernels; beyond that, Compare says where outputs part and whether at a near-tie")

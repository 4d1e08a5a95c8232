"""The verifier drafting for itself: the same weights with some of its layers skipped
(Draft & Verify, Zhang et al. 2023, arXiv:2309.08168; SWIFT, Xia et al. 2024, arXiv:2410.06916).

No second model is loaded: :func:`skip_view` is the verifier's lean forward running only the layers it
keeps (a shallow copy sharing every weight), and the self-drafter is the model drafter over it, with its
own small KV cache for those layers. The draft samples from the q it reports, as the model drafter does,
so the rule keeps the output the verifier's: lossless at any temperature, greedy-identical at T = 0.

Which layers to skip is found on the machine at hand, training-free, as SWIFT does on the fly: on a
calibration text the verifier's own next-token choices are read once (teacher forcing); each layer but
the first is skipped alone and ranked by how often the skipped model still agrees with them (its
top-1 agreement, what a greedy draft's acceptance estimates); then the least harmful 1/4, 3/8 and 1/2 of
the layers are skipped together, and the set with the most expected tokens per unit of draft and verify
cost is kept (Leviathan et al.'s E(a, K) / (K c + 1), c the share of layers run). Cached per model and
precision, like the kernel choice. Skipping half the layers of a 1.5B model costs about what a 0.75B
model does, with the acceptance of a worse draft: whether that pays here is what the race measures.

The verifier's KV cache is not shared: only the layers before the first skipped one see the same inputs
in both models, and the draft writes its guesses where the verifier later writes its own.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch

from specdec.decode.drafters import ModelDrafter
from specdec.model.qwen2 import LeanQwen2
from specdec.options import ConfigError

SKIP_SHARES = (0.25, 0.375, 0.5)  # fractions of the layers skipped that the calibration weighs
CALIBRATION_K = 4                 # the K its expected tokens per round are computed at
SELF_VERSION = 1                  # raised when the calibration changes: older choices are not read
CALIBRATION_TEXT = (
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n    out, i, j = [], 0, 0\n"
    "    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n"
    "        else:\n            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n\n"
    "Speculative decoding lets a small model guess several tokens that a large model then checks in one pass. "
    "When the guesses are good, the large model emits several tokens for the price of one forward.")


def skip_view(model: LeanQwen2, keep: tuple[int, ...]) -> LeanQwen2:
    """The lean forward running only the layers ``keep`` (ascending indices), every weight shared with
    ``model``, which is left as it was. Its caches hold those layers only."""
    if not isinstance(model, LeanQwen2):
        raise ConfigError("the self-drafter needs the lean Qwen2 forward (Qwen2 models on the CPU)", "drafter")
    if not keep or list(keep) != sorted(set(keep)) or not 0 <= keep[0] <= keep[-1] < len(model.layers):
        raise ValueError(f"keep must be ascending layer indices in [0, {len(model.layers)}), got {keep}")
    view = copy.copy(model)
    view._modules = dict(model._modules)  # a module's children live in this dict: the view gets its own
    view.layers = torch.nn.ModuleList(model.layers[i] for i in keep)
    view.shape = replace(model.shape, layers=len(keep))
    return view


@dataclass(frozen=True)
class SkipChoice:
    """The layers a self-draft skips, and what the calibration measured of each set it weighed."""

    skip: tuple[int, ...]
    layers: int
    agreement: dict           # {skipped count: top-1 agreement with the verifier on the calibration text}
    alone: dict               # {layer: agreement with only that layer skipped}

    @property
    def keep(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.layers) if i not in self.skip)

    def to_dict(self) -> dict:
        return {"skip": list(self.skip), "layers": self.layers, "agreement": self.agreement, "alone": self.alone}


def _agreement(model: LeanQwen2, ids: list[int], target: torch.Tensor, vocab: int) -> float:
    """Top-1 agreement of ``model``'s next-token choices with ``target`` over ``ids``, teacher-forced."""
    with torch.inference_mode():
        logits = model(torch.tensor(ids), model.new_cache(len(ids) + 8), len(ids))[:, :vocab]
    return float((logits.argmax(-1) == target).float().mean())


def expected_rate(a: float, k: int, c: float) -> float:
    """E(a, K) / (K c + 1): expected tokens per unit of cost, the verification counted as one step."""
    e = k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
    return e / (k * c + 1.0)


def calibrate_skip(model: LeanQwen2, ids: list[int], vocab: int) -> SkipChoice:
    """The calibration of the module docstring on ``ids`` (the calibration text's tokens)."""
    layers = len(model.layers)
    with torch.inference_mode():
        target = model(torch.tensor(ids), model.new_cache(len(ids) + 8), len(ids))[:, :vocab].argmax(-1)
    everything = tuple(range(layers))
    alone = {i: _agreement(skip_view(model, tuple(j for j in everything if j != i)), ids, target, vocab)
             for i in range(1, layers)}  # the first layer always runs: it reads the embeddings
    ranked = sorted(alone, key=lambda i: (-alone[i], i))
    agreement, best, best_rate = {}, (), 0.0
    for share in SKIP_SHARES:
        n = max(1, min(len(ranked), round(share * layers)))
        skip = tuple(sorted(ranked[:n]))
        if n in agreement:
            continue
        a = _agreement(skip_view(model, tuple(j for j in everything if j not in skip)), ids, target, vocab)
        agreement[n] = a
        rate = expected_rate(a, CALIBRATION_K, (layers - n) / layers)
        if rate > best_rate:
            best, best_rate = skip, rate
    return SkipChoice(best, layers, agreement, alone)


def choose_skip(pair) -> SkipChoice:
    """The verifier's skipped layers for this machine: calibrated once, then read from the cache."""
    from specdec.model.calibration import cached
    from specdec.model.precision import cpu_description
    ids = pair.tokenizer(CALIBRATION_TEXT)["input_ids"][:160]
    key = ["self-draft-skip", SELF_VERSION, pair.target_name, pair.precision.label]
    with torch.inference_mode():
        table = cached(key, cpu_description(), lambda: {"timings_ms": calibrate_skip(pair.target, ids,
                                                                                   pair.vocab_size).to_dict()})
    ints = lambda d: {int(k): v for k, v in d.items()}  # noqa: E731 - JSON keeps keys as strings
    return SkipChoice(tuple(table["skip"]), table["layers"], ints(table["agreement"]), ints(table["alone"]))


class SelfDrafter(ModelDrafter):
    """The model drafter over the verifier with ``choice``'s layers skipped."""

    def __init__(self, verifier: LeanQwen2, choice: SkipChoice, vocab_size: int, clock, stop_ids=frozenset()):
        self.choice = choice
        super().__init__(skip_view(verifier, choice.keep), vocab_size, clock, stop_ids)

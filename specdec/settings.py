"""The one settings record of a run, and the command-line options that fill it.

:class:`RunSettings` is what a trace file records and what every entry point (CLI, app,
benchmarks) writes: the prompt, who drafts, the models and where they run, and the decoding
configuration. Its defaults come from :class:`~specdec.config.DecodeConfig` and
:class:`ModelChoice`, declared once; ``add_model_arguments`` and ``add_decode_arguments`` build
the matching argparse options for the CLI, the app and the benchmarks from them.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .config import MAX_K, ConfigError, DecodeConfig, SamplingConfig, validate_prompt
from .devices import DEVICES
from .embedded import DEFAULT_DRAFT, DEFAULT_TARGET
from .precision import PRECISIONS

# the draft model, prompt lookup where it finds a match and the draft model elsewhere, the draft
# model drafting token trees, prompt lookup alone, or nobody (verifier only)
DRAFTERS = ("model", "hybrid", "tree", "lookup", "none")
MODEL_DRAFTERS = ("model", "hybrid", "tree")  # the drafters that need the draft model


@dataclass(frozen=True)
class ModelChoice:
    """Which models, on which device, in which precision. ``draft`` None: no draft model."""

    target: str = DEFAULT_TARGET
    draft: str | None = DEFAULT_DRAFT
    device: str = "auto"
    precision: str = "auto"        # the verifier's
    draft_precision: str = "auto"  # the draft's, chosen on its own shapes

    @classmethod
    def of(cls, pair) -> ModelChoice:
        """What a loaded pair actually is: the resolved device and precisions, not "auto"."""
        return cls(pair.target_name, pair.draft_name, str(pair.device), pair.precision.name,
                   pair.draft_precision.name if pair.draft_precision else "auto")

    def load(self, progress=None, k: int = DecodeConfig.k, drafter: str = "model"):
        from .loading import load_pair
        return load_pair(self.target, self.draft if drafter in MODEL_DRAFTERS else None, self.device, self.precision,
                         progress=progress, k=k, draft_precision=self.draft_precision)


@dataclass(frozen=True)
class RunSettings:
    prompt: str
    drafter: str = "model"
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    models: ModelChoice = field(default_factory=ModelChoice)
    chat_template: bool = True

    def __post_init__(self):
        validate_prompt(self.prompt)
        if self.drafter not in DRAFTERS:
            raise ConfigError(f"drafter must be one of {', '.join(DRAFTERS)} (got {self.drafter!r})", "drafter")

    def to_dict(self) -> dict:
        """Flat and JSON-ready: the ``settings`` object of a trace file."""
        d, s, m = self.decode, self.decode.sampling, self.models
        return {"prompt": self.prompt, "drafter": self.drafter, "chat_template": self.chat_template,
                "target": m.target, "draft": m.draft if self.drafter in MODEL_DRAFTERS else None,
                "device": m.device, "precision": m.precision,
                "draft_precision": m.draft_precision if self.drafter in MODEL_DRAFTERS else None, "k": d.k, "confidence": d.confidence, "temperature": s.temperature,
                "top_k": s.top_k, "top_p": s.top_p, "seed": d.seed, "max_new_tokens": d.max_new_tokens,
                "draft_noise": d.draft_noise, "ignore_eos": d.ignore_eos, "tree_width": d.tree_width,
                "tree_nodes": d.tree_nodes}

    @classmethod
    def from_dict(cls, d: dict) -> RunSettings:
        """Inverse of ``to_dict``; a missing entry takes its default. Raises ConfigError."""
        decode, model = DecodeConfig(), ModelChoice()
        get = lambda key, default: d.get(key, default)  # noqa: E731
        sampling = SamplingConfig(get("temperature", decode.sampling.temperature), get("top_k", decode.sampling.top_k),
                                  get("top_p", decode.sampling.top_p))
        return cls(prompt=get("prompt", None), drafter=get("drafter", "model"), chat_template=get("chat_template", True),
                   decode=DecodeConfig(get("max_new_tokens", decode.max_new_tokens), get("k", decode.k),
                                       get("confidence", decode.confidence), get("seed", decode.seed), sampling,
                                       draft_noise=get("draft_noise", decode.draft_noise),
                                       ignore_eos=get("ignore_eos", decode.ignore_eos),
                                       tree_width=get("tree_width", decode.tree_width),
                                       tree_nodes=get("tree_nodes", decode.tree_nodes)),
                   models=ModelChoice(get("target", model.target), get("draft", model.draft),
                                      get("device", model.device), get("precision", model.precision),
                                      get("draft_precision", None) or model.draft_precision))


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    m = ModelChoice()
    parser.add_argument("--target", default=m.target, help=f"verifier model (default {m.target})")
    parser.add_argument("--draft", default=m.draft, help=f"draft model (default {m.draft})")
    # No argparse ``choices``: the library checks these and its one-line error names the field.
    parser.add_argument("--device", default=m.device, help=f"{', '.join(DEVICES)} (default auto: MPS, then CUDA, "
                                                            "then CPU)")
    parser.add_argument("--precision", default=m.precision,
                        help=f"the verifier's: {', '.join(PRECISIONS)} (default auto: chosen by measurement on "
                             "this machine)")
    parser.add_argument("--draft-precision", default=m.draft_precision,
                        help=f"the draft's: {', '.join(PRECISIONS)} (default auto: measured on the draft's own "
                             "shapes, at one row)")


def models_from_args(args: argparse.Namespace) -> ModelChoice:
    return ModelChoice(args.target, args.draft or None, args.device, args.precision, args.draft_precision)


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    d = DecodeConfig()
    parser.add_argument("--drafter", default="model",
                        help=f"who drafts: {', '.join(DRAFTERS)} (hybrid: prompt lookup where it matches, the model "
                             "elsewhere; tree: the model drafting token trees; none: verifier only; default model)")
    parser.add_argument("--tree-width", type=int, default=d.tree_width,
                        help="drafter tree: children per expanded node, 1..8 (1 is the chain; default 0: chosen "
                             "from this machine's measured costs)")
    parser.add_argument("--tree-nodes", type=int, default=d.tree_nodes,
                        help="drafter tree: most drafted nodes per round, 1..64 (default 0: chosen from this "
                             "machine's measured costs)")
    parser.add_argument("--k", type=int, default=d.k, help=f"most drafted tokens per round, 1..{MAX_K} (default {d.k})")
    parser.add_argument("--confidence", type=float, default=d.confidence,
                        help="stop drafting after a token the draft gives less than this probability; "
                             f"0 = always K (default {d.confidence})")
    parser.add_argument("--temperature", type=float, default=d.sampling.temperature,
                        help=f"0 = greedy (default {d.sampling.temperature:g})")
    parser.add_argument("--top-k", type=int, default=d.sampling.top_k, help="0 disables (default 0)")
    parser.add_argument("--top-p", type=float, default=d.sampling.top_p, help="in (0, 1] (default 1.0)")
    parser.add_argument("--seed", type=int, default=d.seed, help=f"default {d.seed}")
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help=f"default {d.max_new_tokens}")
    parser.add_argument("--draft-noise", type=float, default=d.draft_noise,
                        help="e in [0, 1]: the draft samples from (1 - e) q + e * uniform; lossless, just a worse "
                             "draft (default 0)")
    parser.add_argument("--ignore-eos", action="store_true", help="generate max-new-tokens tokens, past stop tokens")


def decode_from_args(args: argparse.Namespace) -> DecodeConfig:
    return DecodeConfig(max_new_tokens=args.max_new_tokens, k=args.k, confidence=args.confidence, seed=args.seed,
                        sampling=SamplingConfig(args.temperature, args.top_k, args.top_p),
                        draft_noise=args.draft_noise, ignore_eos=args.ignore_eos, tree_width=args.tree_width,
                        tree_nodes=args.tree_nodes)

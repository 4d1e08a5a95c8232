"""Every drafter by name: how to make it, its words for a reader, and whether it needs the draft model.

The one list of drafters. The command line's ``--drafter`` and the run settings
(:mod:`specdec.decode.settings`), the app's drafter choice (the option's ``app_choices``, built
here), :func:`specdec.decode.start.make_drafter` and the round figure all read it. Adding a
drafter is one :class:`DrafterKind` in :data:`DRAFTERS` and its class.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from specdec.decode.drafters import (
    Drafter,
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    NoDrafter,
)
from specdec.decode.self_draft import SelfDrafter, choose_skip
from specdec.decode.suffix import SuffixDrafter, SuffixElseModel, session_pool
from specdec.decode.tree import TreeDrafter
from specdec.decode.tree_shape import resolve
from specdec.model.devices import Clock
from specdec.options import ConfigError, DecodeConfig

HYBRID_MIN_NGRAM = 3  # the n-gram length that measured fastest on held-out code: benchmarks/results/levers-*.json


@dataclass(frozen=True)
class Making:
    """What a drafter is made from: the pair, and the details of the run a drafter may need."""

    pair: object
    clock: Clock
    hidden: tuple[bool, ...]   # the prompt positions prompt lookup must not read (the chat template's markup)
    stop_ids: frozenset[int]   # after drafting one of these a model drafter stops
    tree: tuple[int, int]      # (W, N) asked of the tree drafter; 0 for this machine's choice
    cfg: DecodeConfig          # the run, for the tree drafter's choice of shape


@dataclass(frozen=True)
class DrafterKind:
    """One drafter: its name, its words, and the factory that makes it for a run."""

    name: str                  # as the command line, the settings and a trace file name it
    label: str                 # its words in the app's drafter choice and on the round figure
    needs_draft: bool          # runs the pair's draft model: loaded with it, named in the run's record
    make: Callable[[Making], Drafter]
    help: str = ""             # what the name does not say, for the command line's help
    in_app: bool = True        # offered by the app (verifier only runs beside the others in Compare)
    paced: bool = False        # an adaptive run chooses its K (a tree: its shape) each round (specdec.decode.pacing)


def _model(m: Making) -> Drafter:
    return ModelDrafter(m.pair.draft, m.pair.vocab_size, m.clock, m.stop_ids)


def _hybrid(m: Making) -> Drafter:
    # a 1- or 2-token match is weak evidence of copying: the hybrid copies after a 3-gram only
    lookup = LookupDrafter(m.pair.vocab_size, min_ngram=HYBRID_MIN_NGRAM, hidden=m.hidden, device=m.pair.device)
    return HybridDrafter(lookup, _model(m))


def _tree(m: Making) -> Drafter:
    shape, _ = resolve(m.pair, replace(m.cfg, tree_width=m.tree[0], tree_nodes=m.tree[1]))
    if shape.tree_width == 1:  # width 1 is the chain: the chain drafter drafts it (N does not apply)
        return _model(m)
    # an adaptive run's drafter is reshaped before each round; it starts at the largest shape the run may choose
    return TreeDrafter(m.pair.draft, m.pair.vocab_size, m.clock, shape.tree_width, shape.tree_nodes, m.stop_ids)


def _suffix(m: Making) -> SuffixDrafter:
    # its node cap: the tree's N where the run sets one, else 2K (a round's rows cost real time on a CPU)
    return SuffixDrafter(m.pair.vocab_size, m.hidden, session_pool(m.pair.target_name),
                         nodes=m.cfg.tree_nodes or 2 * m.cfg.k, device=m.pair.device)


def _self(m: Making) -> SelfDrafter:
    from specdec.model.qwen2 import LeanQwen2
    if not isinstance(m.pair.target, LeanQwen2):
        raise ConfigError("drafter 'self' needs the lean Qwen2 forward in the verifier (Qwen2 models on the CPU)",
                          "drafter")
    return SelfDrafter(m.pair.target, choose_skip(m.pair), m.pair.vocab_size, m.clock, m.stop_ids)


MODEL = DrafterKind("model", "draft model", True, _model, paced=True)
SUFFIX = DrafterKind("suffix", "suffix tree", False, _suffix,
                     help="a token tree of what followed the last tokens in the prompt, the output and earlier runs")
SUFFIX_MODEL = DrafterKind("suffix-model", "suffix tree, else model", True,
                           lambda m: SuffixElseModel(_suffix(m), _model(m)),
                           help="the suffix tree where the last 3+ tokens matched, the model elsewhere")
HYBRID = DrafterKind("hybrid", "lookup, else model", True, _hybrid,
                     help="prompt lookup where it matches, the model elsewhere", paced=True)
TREE = DrafterKind("tree", "model, as a token tree", True, _tree, help="the model drafting token trees", paced=True)
LOOKUP = DrafterKind("lookup", "prompt lookup", False,
                     lambda m: LookupDrafter(m.pair.vocab_size, hidden=m.hidden, device=m.pair.device))
VERIFIER_ONLY = DrafterKind("none", "verifier only", False, lambda m: NoDrafter(m.pair.vocab_size, m.pair.device),
                            help="verifier only", in_app=False)
SELF = DrafterKind("self", "the verifier, layers skipped", False, _self,
                   help="the verifier drafting for itself with some layers skipped (chosen on this machine, cached)")
DRAFTERS = {d.name: d for d in (MODEL, HYBRID, TREE, LOOKUP, SUFFIX, SUFFIX_MODEL, SELF, VERIFIER_ONLY)}


def needs_draft(name: str) -> bool:
    """Whether the drafter called ``name`` runs the draft model (False for a name no drafter has)."""
    return name in DRAFTERS and DRAFTERS[name].needs_draft

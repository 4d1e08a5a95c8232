"""Starting a run from a prompt: the prompt checked and encoded (through the chat template unless
``chat`` is False), the drafter made by name, and the tree drafter's shape decided here, once,
before the run (:func:`specdec.decode.tree_shape.resolve`), so that every entry point (the CLI,
the app, the benchmarks, the notebooks) records the shape that ran.

It sits above the engine because deciding the shape may time short runs of the engine itself.
"""
from __future__ import annotations

from dataclasses import replace

from specdec.decode.drafters import (
    Drafter,
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    NoDrafter,
)
from specdec.decode.engine import Generation, stop_ids_of
from specdec.decode.settings import DRAFTERS
from specdec.decode.tree import TreeDrafter
from specdec.decode.tree_shape import resolve
from specdec.model.devices import Clock
from specdec.options import ConfigError, DecodeConfig

HYBRID_MIN_NGRAM = 3  # the n-gram length that measured fastest on held-out code: benchmarks/results/levers-*.json


def start(pair, prompt: str, cfg: DecodeConfig, drafter: str = "model", chat: bool = True) -> Generation:
    """A :class:`~specdec.decode.engine.Generation` of ``prompt`` with the drafter named ``drafter``."""
    ids, hidden = pair.encode_marked(prompt, chat=chat)
    cfg, why = resolve(pair, cfg) if drafter == "tree" else (cfg, "")
    return Generation(pair, ids, cfg, make_drafter(drafter, pair, hidden=hidden, stop_ids=stop_ids_of(pair, cfg),
                                                   tree=(cfg.tree_width, cfg.tree_nodes), cfg=cfg), why)


def make_drafter(kind: str, pair, clock: Clock | None = None, hidden: tuple[bool, ...] = (),
                 stop_ids: frozenset[int] | None = None, tree: tuple[int, int] = (0, 0),
                 cfg: DecodeConfig | None = None) -> Drafter:
    """``model`` (the pair's draft model), ``hybrid`` (prompt lookup where it matches, the model
    elsewhere), ``lookup`` (prompt lookup), ``tree`` (the draft model drafting token trees of
    ``tree`` = (width, nodes), 0 for the machine's choice for the run ``cfg``: see
    :func:`specdec.decode.tree_shape.resolve`) or ``none`` (verifier only).
    ``hidden``: the prompt positions prompt lookup must not read (the chat template's markup);
    ``stop_ids``: after drafting one of these the model drafter stops (default: the pair's)."""
    if kind == "none":
        return NoDrafter(pair.vocab_size, pair.device)
    if kind == "lookup":
        return LookupDrafter(pair.vocab_size, hidden=hidden, device=pair.device)
    if kind == "tree":
        shape, _ = resolve(pair, replace(cfg or DecodeConfig(), tree_width=tree[0], tree_nodes=tree[1]))
        if shape.tree_width > 1:
            return TreeDrafter(pair.draft, pair.vocab_size, clock or Clock(pair.device), shape.tree_width,
                               shape.tree_nodes, pair.stop_ids if stop_ids is None else stop_ids)
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

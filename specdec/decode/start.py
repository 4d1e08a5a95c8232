"""Starting a run from a prompt: the prompt checked and encoded (through the chat template unless
``chat`` is False), the drafter made by name (:mod:`specdec.decode.registry`), and the tree
drafter's shape decided here, once, before the run (:func:`specdec.decode.tree_shape.resolve`), so
that every entry point (the CLI, the app, the benchmarks, the notebooks) records the shape that ran.

It sits above the engine because deciding the shape may time short runs of the engine itself.
"""
from __future__ import annotations

import torch

from specdec.decode.drafters import Drafter
from specdec.decode.engine import Generation, stop_ids_of
from specdec.decode.pacing import Pacer, RoundCosts
from specdec.decode.registry import DRAFTERS, LOOKUP, MODEL, TREE, Making
from specdec.decode.tree_shape import candidates, machine_costs, resolve
from specdec.model.qwen2 import LeanQwen2
from specdec.model.devices import Clock
from specdec.options import ConfigError, DecodeConfig


def start(pair, prompt: str, cfg: DecodeConfig, drafter: str = MODEL.name, chat: bool = True) -> Generation:
    """A :class:`~specdec.decode.engine.Generation` of ``prompt`` with the drafter named ``drafter``."""
    ids, hidden = pair.encode_marked(prompt, chat=chat)
    cfg, why = resolve(pair, cfg) if drafter == TREE.name else (cfg, "")
    return Generation(pair, ids, cfg, make_drafter(drafter, pair, hidden=hidden, stop_ids=stop_ids_of(pair, cfg),
                                                   tree=(cfg.tree_width, cfg.tree_nodes), cfg=cfg), why,
                      pacer=make_pacer(pair, cfg, drafter))


def make_pacer(pair, cfg: DecodeConfig, drafter: str) -> Pacer | None:
    """The pacer of an adaptive run (:mod:`specdec.decode.pacing`), its costs timed on this machine
    (once, then cached); for the tree drafter, it weighs the tree shapes of the run's W and N
    (:func:`specdec.decode.tree_shape.candidates`) beside the chains. None where the run is not adaptive
    or its drafter is not paced (prompt lookup drafts without a forward, verifier only drafts nothing)."""
    if not cfg.adaptive or not DRAFTERS[drafter].paced:
        return None
    if not (isinstance(pair.target, LeanQwen2) and isinstance(pair.draft, LeanQwen2)):
        raise ConfigError("adaptive needs the lean Qwen2 forward in both models (Qwen2 models on the CPU), "
                          "to time this machine's costs", "adaptive")
    with torch.inference_mode():
        return Pacer(RoundCosts.of_machine(machine_costs(pair)), cfg.k, candidates(cfg) if drafter == TREE.name else ())


def make_drafter(kind: str, pair, clock: Clock | None = None, hidden: tuple[bool, ...] = (),
                 stop_ids: frozenset[int] | None = None, tree: tuple[int, int] = (0, 0),
                 cfg: DecodeConfig | None = None) -> Drafter:
    """The drafter named ``kind`` (:data:`specdec.decode.registry.DRAFTERS`) for ``pair``. ``tree``:
    the tree drafter's (width, nodes), 0 for the machine's choice for the run ``cfg`` (see
    :func:`specdec.decode.tree_shape.resolve`). ``hidden``: the prompt positions prompt lookup must
    not read (the chat template's markup); ``stop_ids``: after drafting one of these a model
    drafter stops (default: the pair's)."""
    if kind not in DRAFTERS:
        raise ConfigError(f"drafter must be one of {', '.join(DRAFTERS)} (got {kind!r})", "drafter")
    if DRAFTERS[kind].needs_draft and pair.draft is None:
        raise ConfigError(f"drafter {kind!r} needs a draft model; load one or use drafter {LOOKUP.name!r}", "drafter")
    return DRAFTERS[kind].make(Making(pair, clock or Clock(pair.device), hidden,
                                      pair.stop_ids if stop_ids is None else stop_ids, tree, cfg or DecodeConfig()))

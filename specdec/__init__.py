"""specdec: speculative decoding you can see and measure (Leviathan et al. 2023; Chen et al. 2023).

The package, by job (arrows point down only; ``tests/test_layout.py`` holds it to that):

==================  ======================================================================
``specdec.cli``     the command line (``python -m specdec``)
``specdec.teach``   what the app and notebooks show: explanations, the round figure, theory
``specdec.decode``  the algorithm: proposals, drafters, the rule, the engine, a round's record
``specdec.weights`` the embedded models, GGUF reading, the packed on-disk cache, loading a pair
``specdec.model``   the lean Qwen2 forward, its KV cache, kernels, precision, devices, timing
``specdec.trace``   a run's record as JSON (a leaf: everyone may read it)
``specdec.options`` every option declared once, the two config records (a leaf)
==================  ======================================================================

The names below are importable from ``specdec`` itself, loaded on first use: ``import specdec``
(and ``import specdec.decode.rule``) loads neither transformers nor the models.
"""
from __future__ import annotations

import importlib

_PUBLIC = {
    "specdec.options": ("ConfigError", "DecodeConfig", "SamplingConfig"),
    "specdec.trace": ("DraftPosition", "PhaseTimes", "RoundTrace", "RunSummary", "TokenProb", "TraceFile",
                      "TreeNode", "TreeRound", "summarize"),
    "specdec.decode.drafters": ("Drafter", "LookupDrafter", "ModelDrafter", "NoDrafter"),
    "specdec.decode.engine": ("Generation",),
    "specdec.decode.proposal": ("Proposal",),
    "specdec.decode.start": ("make_drafter", "start"),
    "specdec.decode.rule": ("DrafterContractError", "TreeVerdict", "Verdict", "verify", "verify_tree"),
    "specdec.decode.sampling": ("NumericalError",),
    "specdec.decode.registry": ("DRAFTERS",),
    "specdec.decode.settings": ("ModelChoice", "RunSettings"),
    "specdec.decode.tree": ("TreeDrafter",),
    "specdec.weights.catalogue": ("DEFAULT_DRAFT", "DEFAULT_TARGET", "EMBEDDED"),
    "specdec.weights.errors": ("ModelLoadError",),
    "specdec.weights.loading": ("load_pair",),
    "specdec.weights.pairing": ("ModelPair",),
    "specdec.teach.figure": ("round_figure", "save_round_figure"),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'specdec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

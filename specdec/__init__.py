"""specdec: speculative decoding you can see and measure (Leviathan et al. 2023; Chen et al. 2023)."""
from .config import ConfigError, DecodeConfig, SamplingConfig
from .drafters import Drafter, LookupDrafter, ModelDrafter, NoDrafter
from .embedded import DEFAULT_DRAFT, DEFAULT_TARGET, EMBEDDED
from .engine import Generation, make_drafter
from .errors import ModelLoadError
from .figure import round_figure, save_round_figure
from .loading import load_pair
from .pairing import ModelPair
from .rule import DrafterContractError, TreeVerdict, Verdict, verify, verify_tree
from .sampling import NumericalError
from .settings import DRAFTERS, ModelChoice, RunSettings
from .trace import DraftPosition, PhaseTimes, RoundTrace, RunSummary, TokenProb, TraceFile, TreeNode, TreeRound, summarize
from .proposal import Proposal
from .tree import TreeDrafter

__all__ = [
    "ConfigError", "DecodeConfig", "SamplingConfig", "Drafter", "LookupDrafter", "ModelDrafter", "NoDrafter",
    "Proposal", "DEFAULT_DRAFT", "DEFAULT_TARGET", "EMBEDDED", "ModelLoadError", "Generation", "make_drafter",
    "ModelPair", "load_pair", "DrafterContractError", "TreeVerdict", "Verdict", "verify", "verify_tree",
    "NumericalError", "DRAFTERS", "ModelChoice", "RunSettings", "DraftPosition", "PhaseTimes", "RoundTrace",
    "RunSummary", "TokenProb", "TraceFile", "summarize", "TreeNode", "TreeRound", "TreeDrafter", "round_figure",
    "save_round_figure",
]

"""specdec: speculative decoding you can see and measure (Leviathan et al. 2023; Chen et al. 2023)."""
from .config import ConfigError, GenerationConfig, SamplingConfig
from .drafters import Drafter, LookupDrafter, ModelDrafter, NoDrafter, Proposal
from .engine import DRAFTERS, Generation, make_drafter, start
from .models import DEFAULT_DRAFT, DEFAULT_TARGET, EMBEDDED, ModelLoadError, ModelPair, load_pair
from .rule import Verdict, verify
from .trace import DraftPosition, PhaseTimes, RoundTrace, RunSummary, TokenProb, summarize

__all__ = [
    "ConfigError", "GenerationConfig", "SamplingConfig", "Drafter", "LookupDrafter", "ModelDrafter",
    "NoDrafter", "Proposal", "DRAFTERS", "Generation", "make_drafter", "start", "DEFAULT_DRAFT",
    "DEFAULT_TARGET", "EMBEDDED", "ModelLoadError", "ModelPair", "load_pair", "Verdict", "verify",
    "DraftPosition", "PhaseTimes", "RoundTrace", "RunSummary", "TokenProb", "summarize",
]

"""State of the app: the shared model loader, the settings form, a browser session, the step-through.

No gradio here: the tier-1 tests drive all of it directly with tiny models.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from specdec import ConfigError, DecodeConfig, Generation, ModelChoice, ModelLoadError, RoundTrace, RunSettings
from specdec.config import SamplingConfig

# The settings form, in the order the layout shows it; the handlers receive a dict keyed by these.
FORM = ("prompt", "drafter", "k", "confidence", "temperature", "top_k", "top_p", "seed", "max_new_tokens")
# The words on the screen for each field (and the upload box); messages use them, never the code names.
FIELD_LABELS = {"prompt": "Prompt", "drafter": "Drafter", "k": "K (drafted tokens per round)",
          "confidence": "Draft confidence (0 = always K)", "temperature": "Temperature (0 = greedy)",
          "top_k": "Top-k (0 = off)", "top_p": "Top-p", "seed": "Seed", "max_new_tokens": "Max new tokens",
          "upload": "Replay a downloaded trace"}
INTEGER_FIELDS = ("k", "top_k", "seed", "max_new_tokens")
# The app's models are shared by every browser session: a prompt may hold this many tokens, well
# under the 32k context, so that no one prompt's prefill holds the models for minutes. The CLI
# takes prompts up to the model's context.
APP_PROMPT_TOKENS = 2048


def form_defaults() -> dict:
    """The form's initial values: the engine's defaults, declared once in specdec.config."""
    d = DecodeConfig()
    return {"prompt": "", "drafter": "model", "k": d.k, "confidence": d.confidence,
            "temperature": d.sampling.temperature, "top_k": d.sampling.top_k, "top_p": d.sampling.top_p,
            "seed": d.seed, "max_new_tokens": d.max_new_tokens}


def _whole_numbers(form: dict) -> dict:
    """Number boxes deliver floats: 3.0 is the integer 3, but 2.5 is refused, never rounded."""
    out = dict(form)
    for name in INTEGER_FIELDS:
        value = out.get(name)
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"{name} must be a whole number (got {value:g})", name)
            out[name] = int(value)
    return out


def parse_form(form: dict, pair) -> RunSettings:
    """The form's values as the run's settings record; ConfigError names the first bad field."""
    form = _whole_numbers(form)
    sampling = SamplingConfig(form["temperature"], form["top_k"], form["top_p"])
    decode = DecodeConfig(max_new_tokens=form["max_new_tokens"], k=form["k"], confidence=form["confidence"],
                          seed=form["seed"], sampling=sampling)
    settings = RunSettings(form["prompt"], form["drafter"], decode, ModelChoice.of(pair))
    n = len(pair.encode(settings.prompt))
    if n > APP_PROMPT_TOKENS:
        raise ConfigError(f"prompt must be at most {APP_PROMPT_TOKENS} tokens in the app, which shares its models "
                          f"with every browser session (got {n} tokens); the command line takes longer prompts",
                          "prompt")
    return settings


def changes(old: RunSettings, new: RunSettings) -> list[str]:
    """The form fields whose values differ, by their labels on the screen."""
    a, b = old.to_dict(), new.to_dict()
    return [FIELD_LABELS[name] for name in FORM if a.get(name) != b.get(name)]


class Loader:
    """Loads the pair once per process in a background thread and reports progress."""

    def __init__(self, models: ModelChoice, pair=None):
        self.models = models
        self.pair, self.error, self.seconds = pair, None, 0.0
        self.fraction, self.message = (1.0, "models ready") if pair is not None else (0.0, "waiting to load the models")
        self._thread: threading.Thread | None = None

    def load_in_background(self) -> Loader:
        if self._thread is None and self.pair is None:
            self._thread = threading.Thread(target=self._load, name="specdec-loader", daemon=True)
            self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> Loader:
        if self._thread is not None:
            self._thread.join(timeout)
        return self

    def _progress(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message

    def _load(self) -> None:
        t0 = time.perf_counter()
        try:
            self.pair = self.models.load(progress=self._progress)
            self.seconds, self.message = time.perf_counter() - t0, "models ready"
        except (ConfigError, ModelLoadError) as e:
            self.error = str(e)


@dataclass(frozen=True)
class Walkthrough:
    """The step tab: the rounds committed so far, the round on show and how much of it is revealed.

    The engine computes a round in one go; the walkthrough reveals it phase by phase. ``phase``:
    ``none`` (nothing on show), ``draft`` and ``verify`` (a round on show, not yet committed),
    ``commit`` (the round on show is the last committed one). Pure: ``press`` returns a new
    walkthrough and a notice; the caller pulls a new round from the engine first when
    ``needs_round`` says so.
    """

    rounds: tuple[RoundTrace, ...] = ()
    shown: RoundTrace | None = None
    phase: str = "none"

    ACTIONS = ("draft", "verify", "next", "step", "reset")

    @property
    def pending(self) -> bool:
        """A round is on show but not committed."""
        return self.phase in ("draft", "verify")

    def needs_round(self, action: str) -> bool:
        return action == "next" or (not self.pending and action in ("draft", "verify", "step"))

    def press(self, action: str, new_round: RoundTrace | None = None, finished: str | None = None
              ) -> tuple[Walkthrough, str]:
        """``new_round``: the round pulled for this action (None when the generation has ended,
        ``finished`` then says why)."""
        if action == "reset":
            return Walkthrough(), "Reset: press Draft or Step round to begin."
        if self.pending and action == "step":
            return replace(self, rounds=self.rounds + (self.shown,), phase="commit"), ""
        if self.pending and action == "verify":
            return replace(self, phase="verify"), ""
        if self.pending and action == "draft":
            return self, "This round is already drafted: press Verify, Next round or Step round. "
        walk, notice = self, ""
        if self.pending:  # next: commit the round on show, then draft the next one
            walk = Walkthrough(self.rounds + (self.shown,))
            notice = f"Round {self.shown.index + 1} committed. "
        if new_round is None:
            return Walkthrough(walk.rounds), notice + f"The generation has finished ({finished}). Press Reset."
        phase = {"draft": "draft", "next": "draft", "verify": "verify", "step": "commit"}[action]
        return Walkthrough(walk.rounds + ((new_round,) if phase == "commit" else ()), new_round, phase), notice


@dataclass
class Session:
    """One browser session: the step-through generation, the last run's tokens, stop and busy flags."""

    settings: RunSettings | None = None
    gen: Generation | None = None
    walk: Walkthrough = Walkthrough()
    run_segments: list = field(default_factory=list)
    running: list = field(default_factory=list)  # the generations a run or comparison is streaming
    stop: bool = False                # asked to stop them

    def restart(self, settings: RunSettings, gen: Generation) -> None:
        self.settings, self.gen, self.walk = settings, gen, Walkthrough()

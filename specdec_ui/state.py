"""State of the app: the shared model loader, the settings form, a browser session, the step-through,
and the worker thread that drives a run while the page follows it.

No gradio here: the tier-1 tests drive all of it directly with tiny models.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from specdec import (ConfigError, Generation, ModelChoice, ModelLoadError, NumericalError, RoundTrace, RunSettings,
                     TraceFile)
from specdec.options import build, flat, options_of
from specdec.render import PHASES_OF_A_ROUND

# The settings form: the options the app shows (those with a label, :mod:`specdec.options`), in
# their order; the handlers receive a dict keyed by their names.
FIELDS = tuple(o for o in options_of(RunSettings) if o.label)
FORM = tuple(o.name for o in FIELDS)
# The words on the screen for each field (and the upload box); messages use them, never the code names.
FIELD_LABELS = {**{o.name: o.label for o in FIELDS}, "upload": "Replay a downloaded trace", "runs": "Runs"}
# The line under a field: the option's meaning, the CLI's help too. A radio's choices and a text
# box say what they take, and get none.
HINTS = {**{o.name: None if o.app_choices or o.type is str else o.help for o in FIELDS},
         "runs": "pairs of runs, seeds s, s+1, ...: the spread of the speed-up"}
TREE_FIELDS = tuple(o.name for o in FIELDS if o.drafters == ("tree",))  # shown, read and checked with the tree only
INTEGER_FIELDS = (*(o.name for o in FIELDS if o.type is int), "runs")
# The app's models are shared by every browser session: a prompt may hold this many tokens, well
# under the 32k context, so that no one prompt's prefill holds the models for minutes. The CLI
# takes prompts up to the model's context.
APP_PROMPT_TOKENS = 2048


def form_defaults() -> dict:
    """The form's initial values: the options' defaults (a required one starts empty)."""
    return {o.name: "" if o.required else o.default for o in FIELDS}


def form_values(settings: RunSettings) -> dict:
    """The form's values for a settings record (a replayed trace restores them)."""
    values = flat(settings)
    return {name: values[name] for name in FORM}


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


def parse_form(form: dict, pair=None) -> RunSettings:
    """The form's values as the run's settings record; ConfigError names the first bad field.
    Without a pair (a replay needs no models) the prompt's length in tokens is not checked. A
    field that only some drafters read (the tree's W and N) is hidden and not read with another
    drafter: it takes its default, as do the options the app does not show."""
    unread = {o.name: o.default for o in FIELDS if o.drafters and form.get("drafter") not in o.drafters}
    settings = build(RunSettings, _whole_numbers({**form, **unread}))
    if pair is None:
        return settings
    settings = replace(settings, models=ModelChoice.of(pair))
    n = len(pair.encode(settings.prompt))
    if n > APP_PROMPT_TOKENS:
        raise ConfigError(f"prompt must be at most {APP_PROMPT_TOKENS} tokens in the app, which shares its models "
                          f"with every browser session (got {n} tokens); the command line takes longer prompts",
                          "prompt")
    return settings


def check_field(name: str, value, pair=None) -> None:
    """The check a run makes of one form field: ConfigError with the message :func:`parse_form` would
    raise for ``name`` holding ``value`` (its length in tokens only with a ``pair``). The other
    fields hold values that pass (the defaults, a one-character prompt, a drafter that reads ``name``)."""
    o = FIELDS[FORM.index(name)]
    reader = {"drafter": o.drafters[0]} if o.drafters else {}
    parse_form({**form_defaults(), "prompt": "?", **reader, name: value}, pair)


def changes(old: RunSettings, new: RunSettings) -> list[str]:
    """The form fields whose values differ, by their labels on the screen."""
    a, b = old.to_dict(), new.to_dict()
    return [FIELD_LABELS[name] for name in FORM if a.get(name) != b.get(name)]


class Loader:
    """Loads the pair once per process in a background thread and reports progress."""

    def __init__(self, models: ModelChoice, pair=None):
        self.models = models
        self.pair, self.error, self.seconds = pair, None, 0.0
        self.step_fit: tuple[float, float] | None = None  # this machine's verifier cost a + b·rows in ms, once timed
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
            pair = self.models.load(progress=self._progress)
            self._progress(0.99, "one short warm-up round (the first forward through the weights pays for reading "
                                 "them in; the first round you see should not)")
            warm_up(pair)
            self.pair = pair
            self.seconds, self.message = time.perf_counter() - t0, "models ready"
            print(f"models ready in {self.seconds:.1f} s", file=sys.stderr, flush=True)  # the terminal's view
        except (ConfigError, ModelLoadError) as e:
            self.error = str(e)
            return
        self._time_verification()

    def _time_verification(self) -> None:
        """This machine's cost fit of a verifier forward over L rows, t_f + t_r·L, which the Verify text
        compares each round with: from the calibration cache, else timed once (a few seconds) while no
        round runs. The buttons work meanwhile; a round pressed then waits for the timing to end."""
        from specdec.tree import require_lean
        from specdec.tree_shape import machine_costs
        try:
            require_lean(self.pair)  # the fit times tree forwards of both models
        except ConfigError:
            return
        with self.pair.lock, torch.inference_mode():
            a, b = machine_costs(self.pair)["verify"]
        self.step_fit = (a, b)


def warm_up(pair) -> None:
    """One short round of every kind the app runs (a prefill, one-row and several-row forwards of both
    models), so that the first forward through the weights (mapped from the cache, read in on first
    touch) and the kernels' first calls are paid while loading, not by the learner's first round."""
    from specdec import DecodeConfig
    cfg = DecodeConfig(max_new_tokens=48, ignore_eos=True)
    Generation.from_prompt(pair, "Write a Python function that adds two numbers.", cfg,
                           "model" if pair.draft is not None else "none").run()


class Worker:
    """Runs ``work`` in a thread of its own, so that building and sending the page never sits
    between two rounds of the engine: the page follows the run at its own pace."""

    def __init__(self, work: Callable[[], None]):
        self.error: Exception | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(work,), name="specdec-run", daemon=True).start()

    def _run(self, work) -> None:
        try:
            work()
        except NumericalError as e:  # a model's problem, reported on the page like a bad setting
            self.error = e
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once the work has ended; waits at most ``timeout`` seconds for it."""
        return self._done.wait(timeout)


class CpuShare:
    """What other processes took of this machine's cores while a run went: the learner's browser
    drawing the page among them (on a 2-core machine it competes with the engine's two threads).
    The machine's busy time over the interval less this process's own, as a share of all cores;
    None where the counters cannot be read."""

    def __init__(self):
        self._start = self._read()

    @staticmethod
    def _read():
        try:
            import psutil
            machine, mine = psutil.cpu_times(), psutil.Process().cpu_times()
            busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
            return time.perf_counter(), busy, mine.user + mine.system, psutil.cpu_count() or 1
        except Exception:  # noqa: BLE001 - a platform without the counters: say nothing rather than guess
            return None

    def others(self) -> float | None:
        end = self._read()
        if self._start is None or end is None or end[0] - self._start[0] < 0.5:
            return None
        (t0, busy0, mine0, cores), (t1, busy1, mine1, _) = self._start, end
        return min(1.0, max(0.0, (busy1 - busy0) - (mine1 - mine0)) / ((t1 - t0) * cores))


class Replay:
    """A downloaded trace as a source of rounds for the step-through, like a Generation."""

    def __init__(self, trace: TraceFile):
        self.trace, self.rounds, self._next = trace, [], 0
        self.stop_reason: str | None = None

    def __iter__(self):
        return self

    def __next__(self) -> RoundTrace:
        if self._next == len(self.trace.rounds):
            self.stop_reason = self.trace.stop_reason or "end of the trace"
            raise StopIteration
        r = self.trace.rounds[self._next]
        self._next += 1
        self.rounds.append(r)
        return r


@dataclass(frozen=True)
class Walkthrough:
    """The step tab: the rounds committed so far, the round on show and how far it is revealed.

    The engine computes a round in one go; the walkthrough reveals it phase by phase:
    ``draft``, ``verify``, ``accept`` (a round on show, not yet committed) and ``commit`` (the
    round on show is the last committed one); ``none`` before the first. Pure: ``press``
    returns a new walkthrough and a notice; the caller pulls a new round first when
    ``needs_round`` says so.
    """

    rounds: tuple[RoundTrace, ...] = ()
    shown: RoundTrace | None = None
    phase: str = "none"

    ACTIONS = PHASES_OF_A_ROUND + ("step", "reset")
    NAMES = {"draft": "Draft", "verify": "Verify", "accept": "Accept/reject", "commit": "Commit and roll back"}

    @property
    def pending(self) -> bool:
        """A round is on show but not committed."""
        return self.phase in PHASES_OF_A_ROUND[:-1]

    def needs_round(self, action: str) -> bool:
        return not self.pending and action not in ("reset",)

    def press(self, action: str, new_round: RoundTrace | None = None, finished: str | None = None
              ) -> tuple[Walkthrough, str]:
        """``new_round``: the round pulled for this action (None when the generation has ended,
        ``finished`` then says why). ``step`` reveals the rest of the round, or a whole new one."""
        if action == "reset":
            return Walkthrough(), "Reset: press Draft or Step round to begin."
        target = "commit" if action == "step" else action
        order = PHASES_OF_A_ROUND.index
        if self.pending:
            if order(target) <= order(self.phase):
                following = self.NAMES[PHASES_OF_A_ROUND[order(self.phase) + 1]]
                return self, f"This round is already past {self.NAMES[target]}: press {following} next. "
            committed = self.rounds + ((self.shown,) if target == "commit" else ())
            return replace(self, rounds=committed, phase=target), ""
        if new_round is None:  # the last round stays on show (and downloadable as a figure)
            kept = f": round {len(self.rounds)} stays on show" if self.shown is not None else ""
            return self, f"The generation has finished ({finished}){kept}. Press Reset to start again."
        return Walkthrough(self.rounds + ((new_round,) if target == "commit" else ()), new_round, target), ""


@dataclass
class Session:
    """One browser session: the step-through's source of rounds (a generation, or a replayed
    trace), the last run's tokens, what is running and whether it was asked to stop."""

    settings: RunSettings | None = None
    gen: Generation | Replay | None = None
    walk: Walkthrough = Walkthrough()
    replay: TraceFile | None = None   # an uploaded trace, stepped through while the form matches it
    running: list = field(default_factory=list)  # the generations a run or comparison is driving
    stop: bool = False                # asked to stop them
    sampled: RoundTrace | None = None  # the round the losslessness sampler last ran on

    def restart(self, settings: RunSettings, gen: Generation | Replay) -> None:
        self.settings, self.gen, self.walk = settings, gen, Walkthrough()

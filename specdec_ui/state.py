"""State of the app: the shared model loader, the settings form, a browser session, the step-through,
and the worker thread that drives a run while the page follows it. The models are shared by every
session, one round at a time: the worker and the step-through take their lock around each round
(the engine itself is single-user and takes none).

No gradio here: the tier-1 tests drive all of it directly with tiny models.
"""
from __future__ import annotations

import gc
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Callable, get_args

import torch

from specdec import (
    ConfigError,
    Generation,
    ModelChoice,
    ModelLoadError,
    NumericalError,
    RoundTrace,
    RunSettings,
    TraceFile,
)
from specdec.decode import registry
from specdec.decode.start import start
from specdec.model.devices import DEVICES
from specdec.model.precision import PRECISIONS
from specdec.options import build, flat, options_of
from specdec.teach.render import PHASES_OF_A_ROUND, STEP_NAMES
from specdec.weights.loading import check_source

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
TREE_FIELDS = tuple(o.name for o in FIELDS if o.drafters == (registry.TREE.name,))  # shown, read and checked with the tree only
INTEGER_FIELDS = (*(o.name for o in FIELDS if o.type is int), "runs")
# The header's model form: ModelChoice's options (the command line's --target, --draft, ...), each
# with its label here and the option's own words as its hint; a field with a known set of values is
# a radio of them (the loader still checks that this machine has what was picked).
MODEL_LABELS = {"target": "Verifier", "draft": "Draft", "device": "Device", "precision": "Verifier precision",
                "draft_precision": "Draft precision"}
MODEL_FIELDS = tuple(options_of(ModelChoice))
MODEL_FORM = tuple(o.name for o in MODEL_FIELDS)
MODEL_CHOICES = {"device": DEVICES, "precision": PRECISIONS, "draft_precision": PRECISIONS}
FIELD_LABELS |= {name: MODEL_LABELS[name] for name in MODEL_FORM}
HINTS |= {o.name: o.help for o in MODEL_FIELDS}
# The app's models are shared by every browser session: a prompt may hold this many tokens, well
# under the 32k context, so that no one prompt's prefill holds the models for minutes. The CLI
# takes prompts up to the model's context.
APP_PROMPT_TOKENS = 2048
MAX_RUNS = 5  # the Compare tab's pairs of runs at most: each pair is a whole run of both sides


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


def parse_runs(value) -> int:
    """The Compare tab's Runs, pairs of runs with seeds s, s + 1, ...: a whole number in [1, MAX_RUNS]."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_RUNS):
        shown = "empty" if value is None else f"{value!r}"
        raise ConfigError(f"runs must be a whole number in [1, {MAX_RUNS}] (got {shown})", "runs")
    return value


def check_field(name: str, value, pair=None) -> None:
    """The check a run makes of one form field (or of Runs): ConfigError with the message
    :func:`parse_form` would raise for ``name`` holding ``value`` (its length in tokens only with a
    ``pair``). The other fields hold values that pass (the defaults, a one-character prompt, a
    drafter that reads ``name``)."""
    if name == "runs":
        parse_runs(value)
        return
    o = FIELDS[FORM.index(name)]
    reader = {"drafter": o.drafters[0]} if o.drafters else {}
    parse_form({**form_defaults(), "prompt": "?", **reader, name: value}, pair)


def changes(old: RunSettings, new: RunSettings) -> list[str]:
    """The form fields whose values differ, and the models, by their labels on the screen."""
    a, b = old.to_dict(), new.to_dict()
    return [FIELD_LABELS[name] for name in (*FORM, *MODEL_FORM) if a.get(name) != b.get(name)]


def model_values(models: ModelChoice) -> dict:
    """The header's model form for a choice: a draft of None is an empty box."""
    return {name: "" if value is None else value for name, value in flat(models).items()}


def parse_models(values: dict) -> ModelChoice:
    """The header's model form as a ModelChoice, read as the command line reads its flags: text
    stripped, an empty draft is none. The names are checked where they load, as on the command line."""
    read = {}
    for o in MODEL_FIELDS:
        text = str(values.get(o.name) or "").strip()
        read[o.name] = (text or None) if type(None) in get_args(o.type) else text
    return build(ModelChoice, read)


def model_field(e: Exception) -> str | None:
    """The model form's field a loading error concerns: a ConfigError names it; a ModelLoadError's
    message opens with the model's role, which is the field's name ("target: cannot load ...",
    "draft and target tokenizers disagree ...": the draft is the one to change)."""
    field = getattr(e, "field", None) or str(e).split(":")[0].split(" ")[0]
    return field if field in MODEL_FORM else None


class Loader:
    """Loads the pair in a background thread and reports progress: once at the start, and again
    at each switch to another pair (:meth:`switch`)."""

    def __init__(self, models: ModelChoice, pair=None):
        self.models = models
        self.pair, self.error, self.seconds = pair, None, 0.0
        self.step_fit: tuple[float, float] | None = None  # this machine's verifier cost a + b·rows in ms, once timed
        self.timing = False  # the costs are being timed (after "models ready"): the page says so
        self.fraction, self.message = (1.0, "models ready") if pair is not None else (0.0, "waiting to load the models")
        self.refused: Exception | None = None  # why the last switch failed (the pair before it was loaded again)
        self._thread: threading.Thread | None = None
        self._retiring = None  # the pair a switch replaces, until its thread takes it
        self._sessions: weakref.WeakValueDictionary[int, Session] = weakref.WeakValueDictionary()
        self._switching = threading.Lock()

    def load_in_background(self) -> Loader:
        if self._thread is None and self.pair is None:
            self._thread = threading.Thread(target=self._load_or_fail, name="specdec-loader", daemon=True)
            self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> Loader:
        if self._thread is not None:
            self._thread.join(timeout)
        return self

    @property
    def loading(self) -> bool:
        """A pair is being loaded: none is in use, and none failed for good."""
        return self.pair is None and self.error is None

    def serve(self, session: Session) -> None:
        """Note a session that runs the models, so that a switch can stop it and make it let go of them."""
        self._sessions[id(session)] = session

    def switch(self, models: ModelChoice) -> bool:
        """Load ``models`` in place of the pair in use, in the background; False, and nothing done,
        while a pair is loading. A name that can load nothing is refused at once (:attr:`refused`),
        the pair in use kept; where loading ``models`` fails later, :attr:`refused` says why and the
        pair that was in use is loaded again: nothing is lost but the sessions' step-throughs."""
        with self._switching:
            if self.loading:
                return False
            try:  # a name that can load nothing is refused before the pair in use is released for it
                check_source(models.target, "target")
                if models.draft:
                    check_source(models.draft, "draft")
            except ModelLoadError as e:
                self.refused = e
                return True
            # the old pair is handed over in an attribute the thread clears: a thread's arguments
            # live as long as it runs, and would keep the old pair's memory while the new one loads
            self._retiring, self.pair, self.error, self.refused, self.step_fit = self.pair, None, None, None, None
            self.fraction, self.message = 0.0, "stopping the runs on the models in use"
            previous = self.models if self._retiring is not None else None  # after a failed start: none
            self.models, ended = models, self._thread
            self._thread = threading.Thread(target=self._switch, args=(previous, ended), name="specdec-loader",
                                            daemon=True)
            self._thread.start()
        return True

    def _switch(self, previous: ModelChoice | None, ended: threading.Thread | None) -> None:
        if ended is not None:
            ended.join()  # the last load's timing of the verifier, which holds the old pair
        old, self._retiring = self._retiring, None
        if old is not None:
            # Released before the new pair loads: this machine has room for one pair. Every session
            # stops what runs on the old pair and lets go of it once the round in flight has ended;
            # then the per-process memo forgets it, and its memory goes.
            for session in list(self._sessions.values()):
                session.stop_runs()
            with old.lock:
                for session in list(self._sessions.values()):
                    session.let_go()
            from specdec.weights.loading import unload
            unload(old)
            del old
            gc.collect()
        self.refused = self._load()
        if self.refused is None:
            return
        if previous is None:
            self.error = str(self.refused)
            return
        self.models = previous
        self._progress(0.0, "that pair could not be loaded: loading again the pair in use before")
        self._load_or_fail()

    def _progress(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message

    def _load_or_fail(self) -> None:
        error = self._load()
        if error is not None:
            self.error = str(error)

    def _load(self) -> Exception | None:
        """Load :attr:`models`; the error that stopped it, else None."""
        t0 = time.perf_counter()
        try:
            pair = self.models.load(progress=self._progress)
            self._progress(0.99, "one short warm-up round (the first forward through the weights pays for reading "
                                 "them in; the first round you see should not)")
            warm_up(pair)
            self.timing = True  # before the pair shows: the page's poll then goes on until the timing ends
            self.pair = pair
            self.seconds, self.message = time.perf_counter() - t0, "models ready"
            print(f"models ready in {self.seconds:.1f} s", file=sys.stderr, flush=True)  # the terminal's view
        except (ConfigError, ModelLoadError) as e:
            return e
        try:
            self._time_verification()
        finally:
            self.timing = False
        return None

    def _time_verification(self) -> None:
        """This machine's cost fit of a verifier forward over L rows, t_f + t_r·L, which the Verify text
        compares each round with: from the calibration cache, else timed once (a few seconds) while no
        round runs. The buttons work meanwhile; a round pressed then waits for the timing to end."""
        from specdec.decode.tree import require_lean
        from specdec.decode.tree_shape import machine_costs
        try:
            require_lean(self.pair)  # the fit times tree forwards of both models
        except ConfigError:
            return
        with torch.inference_mode():  # the timing holds the models' lock itself while it times
            a, b = machine_costs(self.pair)["verify"]
        self.step_fit = (a, b)


def warm_up(pair) -> None:
    """One short round of every kind the app runs (a prefill, one-row and several-row forwards of both
    models), so that the first forward through the weights (mapped from the cache, read in on first
    touch) and the kernels' first calls are paid while loading, not by the learner's first round."""
    from specdec import DecodeConfig
    cfg = DecodeConfig(max_new_tokens=48, ignore_eos=True)
    drafter = registry.MODEL.name if pair.draft is not None else registry.VERIFIER_ONLY.name
    start(pair, "Write a Python function that adds two numbers.", cfg, drafter).run()


WAIT_SAID_S = 0.1  # a shorter wait for the models is a hand-over between rounds, not worth a word on the page


class Worker:
    """Pulls the rounds of a run or a comparison in a thread of its own, so that building and sending the
    page never sits between two rounds of the engine: the page follows the run at its own pace.

    The models are shared by every browser session, one round at a time: each round is pulled under
    the pair's lock, and the time spent waiting for it (another session's round) is counted here, in
    no phase of the round (:attr:`waited_s`, :attr:`waiting`). The ``groups`` run one after another;
    within a group the generation furthest behind in its own elapsed time goes next, so that runs
    raced side by side meet the same state of the machine. ``stopped`` ends the work before its next
    round; ``clock`` measures the waits (a test fakes it).
    """

    def __init__(self, groups: list[list[Generation]], stopped: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.perf_counter):
        self.error: Exception | None = None
        self.waited_s = 0.0
        self._since: float | None = None  # when the wait for the models began; None while none is waited for
        self._clock = clock
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(groups, stopped), name="specdec-run", daemon=True).start()

    def _run(self, groups: list[list[Generation]], stopped: Callable[[], bool]) -> None:
        try:
            for group in groups:
                live = list(group)
                while live and not stopped():
                    gen = min(live, key=lambda g: g.rounds[-1].elapsed if g.rounds else 0.0)
                    if self._pull(gen) is None or gen.done:
                        live.remove(gen)
        except NumericalError as e:  # a model's problem, reported on the page like a bad setting
            self.error = e
        finally:
            self._done.set()

    def _pull(self, gen: Generation) -> RoundTrace | None:
        self._since = self._clock()
        with gen.pair.lock:
            self.waited_s += self._clock() - self._since
            self._since = None
            return next(gen, None)

    @property
    def waiting(self) -> bool:
        """Blocked for a while on another session's round; safe from another thread."""
        since = self._since
        return since is not None and self._clock() - since > WAIT_SAID_S

    def wait(self, timeout: float) -> bool:
        """True once the work has ended; waits at most ``timeout`` seconds for it."""
        return self._done.wait(timeout)


def next_round(source) -> RoundTrace | None:
    """The next round of a step-through's source, or None once it has ended: a generation's under its
    models' lock (one round at a time, :class:`Worker`), a replayed trace's at once."""
    if not isinstance(source, Generation):
        return next(source, None)
    with source.pair.lock:
        return next(source, None)


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
                following = STEP_NAMES[PHASES_OF_A_ROUND[order(self.phase) + 1]]
                return self, f"This round is already past {STEP_NAMES[target]}: press {following} next. "
            committed = self.rounds + ((self.shown,) if target == "commit" else ())
            return replace(self, rounds=committed, phase=target), ""
        if new_round is None:  # the last round stays on show (and downloadable as a figure)
            kept = f": round {len(self.rounds)} stays on show" if self.shown is not None else ""
            return self, f"The generation has finished ({finished}){kept}. Press Reset to start again."
        return Walkthrough(self.rounds + ((new_round,) if target == "commit" else ()), new_round, target), ""


class OnePress:
    """A session's lock around a step-through press. Gradio deep-copies a session's first state: the copy
    gets a lock of its own."""

    def __init__(self):
        self._lock = threading.Lock()

    def __enter__(self) -> OnePress:
        self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def __deepcopy__(self, memo) -> OnePress:
        return OnePress()


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
    all_k: bool | None = None          # the step-through's "draft all K" switch when it last stepped
    confident: Any = None              # the Run tab's confidence section: its last run or replayed trace
                                       # (:class:`specdec_ui.threshold.ConfidenceRun`)
    # one step-through press at a time: a second press (Verify while Draft still waits for the models) runs
    # after the first, never beside it, so that two presses cannot pull two rounds of one generation
    stepping: OnePress = field(default_factory=lambda: OnePress(), repr=False, compare=False)

    def restart(self, settings: RunSettings, gen: Generation | Replay) -> None:
        self.settings, self.gen, self.walk = settings, gen, Walkthrough()

    def stop_runs(self) -> None:
        """The models are being switched: the run or comparison on them ends before its next round."""
        self.stop = True
        for gen in self.running:
            gen.cancel()

    def let_go(self) -> None:
        """Let go of the models being switched: the step-through's generation holds them. Its rounds
        stay on show; the next press restarts it on the new pair and says so."""
        if isinstance(self.gen, Generation):
            self.gen = SWITCHED


class Switched:
    """A step-through's source of rounds once its models were switched: it holds no models and has
    no more rounds (a press under way as the switch came ends on it)."""

    stop_reason = "the models were switched"

    def __iter__(self):
        return self

    def __next__(self) -> RoundTrace:
        raise StopIteration


SWITCHED = Switched()

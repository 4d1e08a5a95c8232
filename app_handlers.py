"""The app's handlers as plain functions: settings in, a dict of named display values out.

No gradio here, so the tier-1 tests call them directly with tiny models. A handler reports a bad
setting as ``{"error": message}`` and nothing else, so whatever the page already shows stays.
Each browser session owns one :class:`Session`; the models are shared through one :class:`Loader`
and the engine serialises their use per round.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

import pandas as pd

import app_charts as charts
from specdec import ConfigError, GenerationConfig, ModelLoadError, RoundTrace, SamplingConfig, load_pair, start
from specdec.engine import Generation
from specdec.render import (ROW_HEADERS, cache_text, explain, first_difference, load_trace, position_rows,
                            round_stats, segment_detail, segments, summary_text, trace_json)
from specdec.trace import summarize

NOT_READY = "the models are still loading; this works as soon as they are ready"


class Loader:
    """Loads the pair once per process in a background thread and reports progress."""

    def __init__(self, target: str, draft: str | None, device: str | None = None, precision: str | None = None):
        self.args = (target, draft, device, precision)
        self.fraction, self.message = 0.0, "waiting to load the models"
        self.pair, self.error, self.seconds = None, None, 0.0
        self._thread: threading.Thread | None = None

    @classmethod
    def ready(cls, pair) -> Loader:
        loader = cls(pair.target_name, pair.draft_name)
        loader.pair, loader.fraction, loader.message = pair, 1.0, "models ready"
        return loader

    def start(self) -> Loader:
        if self._thread is None and self.pair is None:
            self._thread = threading.Thread(target=self._load, name="specdec-loader", daemon=True)
            self._thread.start()
        return self

    def _progress(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message

    def _load(self) -> None:
        t0 = time.perf_counter()
        try:
            target, draft, device, precision = self.args
            self.pair = load_pair(target, draft, device, precision, progress=self._progress)
            self.seconds, self.message = time.perf_counter() - t0, "models ready"
        except (ConfigError, ModelLoadError) as e:
            self.error = str(e)

    def info(self) -> str:
        p = self.pair
        if p is None:
            return "Models: " + (f"failed to load: {self.error}" if self.error else "loading...")
        counts = p.param_counts()
        out = (f"**Device** {p.device.type} · **precision** {p.precision.name} · "
               f"**verifier** {p.target_name} ({_count(counts['target'])} parameters)")
        if p.draft is not None:
            out += f" · **draft** {p.draft_name} ({_count(counts['draft'])} parameters)"
        return out + f"  \n*Why {p.precision.name}:* {p.precision.reason.split(': ', 1)[-1]}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


@dataclass(frozen=True)
class Settings:
    prompt: str
    drafter: str
    cfg: GenerationConfig

    @classmethod
    def parse(cls, prompt, drafter, k, confidence, temperature, top_k, top_p, seed, max_new_tokens) -> Settings:
        """Raises ConfigError naming the first bad field; the engine's configs hold the rules."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError("prompt must be a non-empty string")
        return cls(prompt, drafter, GenerationConfig(max_new_tokens=max_new_tokens, k=k, confidence=confidence, seed=seed,
                                                     sampling=SamplingConfig(temperature, top_k, top_p)))

    def start(self, pair, drafter: str | None = None) -> Generation:
        return start(pair, self.prompt, self.cfg, drafter or self.drafter)

    def to_dict(self) -> dict:
        s = self.cfg.sampling
        return {"prompt": self.prompt, "drafter": self.drafter, "k": self.cfg.k, "temperature": s.temperature,
                "top_k": s.top_k, "top_p": s.top_p, "seed": self.cfg.seed, "max_new_tokens": self.cfg.max_new_tokens}


@dataclass
class Session:
    """One browser session: the step-through generation, the last run's tokens, a stop flag."""

    settings: Settings | None = None
    gen: Generation | None = None
    committed: list[RoundTrace] = field(default_factory=list)
    pending: RoundTrace | None = None
    phase: str | None = None          # draft | verify while a round is on show, else None
    run_segments: list = field(default_factory=list)
    stop: bool = False

    def restart(self, settings: Settings, gen: Generation) -> None:
        self.settings, self.gen, self.committed, self.pending, self.phase = settings, gen, [], None, None

    def commit(self) -> Session:
        self.committed.append(self.pending)
        self.pending = self.phase = None
        return self


def highlighted(segs) -> list[tuple[str, str]]:
    return [(s.text, s.label) for s in segs]


# ---- step through one round -------------------------------------------------------------------

def step(loader: Loader, action: str, session: Session, *raw) -> dict:
    """action: draft | verify | next | step | reset. The engine computes a round in one go; the viewer
    reveals it in phases (draft, then verify), Next round commits it and drafts the next one, and
    Step round finishes the round on show (or a new one) at once."""
    if loader.pair is None:
        return {"error": NOT_READY}
    notice = ""
    try:
        settings = Settings.parse(*raw)
        if action == "reset" or session.gen is None or settings != session.settings:
            if session.gen is not None and action != "reset":
                notice = "Settings changed: started a new generation. "
            session.restart(settings, settings.start(loader.pair))
    except ConfigError as e:
        return {"error": str(e)}
    if action == "reset":
        return _step_view(session, "Reset: press Draft or Step round to begin.")
    r = session.pending
    if r is not None and action == "step":
        return _step_view(session.commit(), notice, shown=r)
    if r is not None and action == "next":
        notice += f"Round {r.index + 1} committed. "
        session.commit()
    elif r is not None:
        if action == "verify":
            session.phase = "verify"
            return _step_view(session, "")
        return _step_view(session, "This round is already drafted: press Verify, Next round or Step round. ")
    r = next(session.gen, None)
    if r is None:
        return _step_view(session, notice + f"The generation has finished ({session.gen.stop_reason}). Press Reset.")
    session.pending, session.phase = r, "verify" if action == "verify" else "draft"
    if action == "step":
        return _step_view(session.commit(), notice, shown=r)
    return _step_view(session, notice)


def _step_view(session: Session, notice: str, shown: RoundTrace | None = None) -> dict:
    """The round on show (``shown`` = just stepped and committed) and the text committed so far."""
    r = shown or session.pending
    view = {"step_text": highlighted(segments(session.committed)), "error": None}
    if r is None:
        return {**view, "step_status": notice, "step_explain": "", "step_table": None, "step_cache": "",
                "step_ratio": None, "step_dist": None}
    phases = ("draft", "verify", "commit") if shown else ("draft", "verify")[:2 if session.phase == "verify" else 1]
    verified = "verify" in phases
    drafter, greedy = session.settings.drafter, session.settings.cfg.sampling.greedy
    where = {"draft": "drafted, not yet verified", "verify": "verified, not yet committed"}.get(
        session.phase, "drafted, verified and committed")
    return {**view,
            "step_status": f"{notice}Round {r.index + 1}: {where}.",
            "step_explain": "\n\n".join(explain(r, ph, drafter, greedy) for ph in phases),
            "step_table": pd.DataFrame(position_rows(r, verified), columns=ROW_HEADERS[:7 if verified else 3]),
            "step_cache": cache_text(r) if verified else "",
            "step_ratio": charts.ratio_figure([r]) if verified and r.positions else None,
            "step_dist": charts.distribution_figure(r) if verified else None}


# ---- run the whole generation -----------------------------------------------------------------

def run(loader: Loader, session: Session, *raw):
    """Stream one view per round; Stop ends the run cleanly after the round in progress."""
    if loader.pair is None:
        yield {"error": NOT_READY}
        return
    try:
        settings = Settings.parse(*raw)
        gen = settings.start(loader.pair)
    except ConfigError as e:
        yield {"error": str(e)}
        return
    session.stop = False
    for _ in gen:
        yield _run_view(session, gen.rounds, gen.prefill_s)
        if session.stop:
            break
    ended = f"Finished ({gen.stop_reason})." if gen.done else f"Stopped after {len(gen.rounds)} rounds."
    path = _write_trace(trace_json(settings.to_dict(), gen.rounds, gen.prefill_s, gen.text, gen.stop_reason))
    yield {**_run_view(session, gen.rounds, gen.prefill_s), "run_status": ended, "download": path}


def replay(session: Session, path: str | None) -> dict:
    """Show a downloaded trace without models."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            settings, rounds, prefill_s = load_trace(f.read())
    except (OSError, ValueError) as e:
        return {"error": str(e)}
    label = settings.get("prompt", "(prompt not recorded)")
    return {**_run_view(session, rounds, prefill_s), "run_status": f"Replayed a trace of {len(rounds)} rounds; "
            f"prompt: {label!r}."}


def stop(session: Session, shown: str = "run_status") -> dict:
    """Ask the session's run or comparison to end after the round in progress."""
    session.stop = True
    return {shown: "Stopping after the current round..."}


def token_detail(session: Session, index: int | None, where: str = "run") -> dict:
    """The numbers behind a selected token of the run's text (``run``) or the step-through text (``step``)."""
    segs = session.run_segments if where == "run" else segments(session.committed)
    if index is None or not 0 <= index < len(segs):
        return {}
    return {f"{where}_detail": segment_detail(segs[index])}


def _run_view(session: Session, rounds: list[RoundTrace], prefill_s: float) -> dict:
    segs = segments(rounds)
    session.run_segments = segs
    stats = round_stats(rounds)
    a = stats.running_a[-1] if stats.running_a and stats.drafted and max(stats.drafted) else None
    return {"run_text": highlighted(segs), "run_stats": summary_text(summarize(rounds, prefill_s), a),
            "run_status": f"Round {len(rounds)}...", "error": None,
            "run_ratio": charts.ratio_figure(rounds), "run_timing": charts.timing_figure(rounds),
            "run_acceptance": charts.acceptance_figure(rounds), "run_tokens": charts.tokens_per_round_figure(rounds)}


def _write_trace(text: str) -> str:
    """A file for the download button (gradio serves a copy from its own cache)."""
    folder = os.path.join(tempfile.gettempdir(), "specdec-traces")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"specdec-trace-{uuid.uuid4().hex[:12]}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


# ---- verifier only vs speculative -------------------------------------------------------------

def compare(loader: Loader, session: Session, *raw):
    """Both runs advance in turn, always the one that is behind in its own elapsed time, so the
    race chart fills in step; each round's time is measured inside the engine, waiting excluded."""
    if loader.pair is None:
        yield {"error": NOT_READY}
        return
    try:
        settings = Settings.parse(*raw)
        runs = {"verifier only": settings.start(loader.pair, "none"), "speculative": settings.start(loader.pair)}
    except ConfigError as e:
        yield {"error": str(e)}
        return
    session.stop = False
    live = dict(runs)
    while live and not session.stop:
        name = min(live, key=lambda n: live[n].rounds[-1].elapsed if live[n].rounds else 0.0)
        if next(live[name], None) is None or live[name].done:
            del live[name]
        yield _compare_view(runs, settings, finished=not live)
    if live:
        yield {**_compare_view(runs, settings, finished=False), "badge": "Stopped."}


def _compare_view(runs: dict[str, Generation], settings: Settings, finished: bool) -> dict:
    base, spec = runs["verifier only"], runs["speculative"]
    b, s = base.summary(), spec.summary()
    view = {"base_text": base.text, "spec_text": spec.text, "base_stats": summary_text(b),
            "spec_stats": summary_text(s), "race": charts.race_figure({n: g.rounds for n, g in runs.items()}),
            "error": None, "badge": "Running..."}
    if not finished:
        return view
    speedup = f"**Speedup {s.tokens_per_s / b.tokens_per_s:.2f}x** in tokens/s. " if b.tokens_per_s else ""
    if not settings.cfg.sampling.greedy:
        badge = "Sampling (temperature > 0): the two outputs differ by design; each is a sample from the verifier's p."
    else:
        diff = first_difference(base.token_ids, spec.token_ids)
        badge = ("✓ **Identical output**: speculative decoding reproduced the verifier's greedy tokens exactly."
                 if diff is None else f"≠ **Outputs differ** from token {diff + 1} on. At temperature 0 this "
                 "happens at a tie or near-tie of the verifier's top logits (in bfloat16 they often round to the same "
                 "value), where a forward over K+1 positions and a single-token one can pick different argmaxes.")
    return {**view, "badge": speedup + badge}


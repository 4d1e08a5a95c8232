"""What every tab's handlers share: a :class:`Problem` in place of a view, the settings read from the
form, the words for the models' state, and a run followed as its worker goes.

A handler is a plain function (or generator) of the shared :class:`~.state.Loader`, the browser's
:class:`~.state.Session` and the form as a dict keyed by :data:`~.state.FORM`; it returns its tab's
view record, whose fields are that tab's components by name, or a :class:`Problem` when a setting
is wrong, in which case the page keeps everything it shows and the message appears at the field
concerned. No gradio here: the tier-1 tests call the handlers directly with tiny models. A field
may hold :data:`UNCHANGED`: the page keeps what it shows there (a run redraws its charts less often
than its text, so the browser's drawing does not compete with the engine).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from specdec import ConfigError
from specdec_ui.state import FIELD_LABELS, Loader, Session, Worker, parse_form

UNCHANGED = "unchanged"  # a field's value when the page should keep what it shows
NOT_READY = "The models are still loading; this works as soon as they are ready."
WAITING = "Waiting for another session's round to finish (the models are shared, one round at a time)..."
# A run's page gets a view when a round has ended, at most every REFRESH_S seconds per REFRESH_TOKENS
# tokens on show: each view redraws the whole text, so spacing them out as the text grows keeps the
# browser's work per token flat.
REFRESH_S, REFRESH_TOKENS = 1.0, 128


@dataclass(frozen=True)
class Problem:
    """A bad setting or file: the message, in the page's words, and the field it concerns."""

    message: str
    field: str | None = None


@dataclass(frozen=True)
class Replayed:
    """A view of an uploaded trace, and the settings it restores into the form."""

    view: object
    form: dict


def field_message(problem: Problem, labels: dict[str, str], value=None) -> str:
    """A ConfigError message in the words on the screen: the field's label instead of its code
    name, and "is empty" instead of "(got None)"."""
    msg = problem.message
    field = problem.field
    if field in labels and msg.startswith(field):
        rest = msg[len(field):]
        if value is None and re.search(r"\(got None\)$", rest):
            allowed = re.sub(r"^ must be | \(got None\)$", "", rest)
            return f"{labels[field]} is empty: enter {allowed}."
        return labels[field] + rest + "."
    return msg


def problem(e: Exception, form: dict | None = None) -> Problem:
    """An error as the page says it, at the field it names (``form``: the values, to say "is empty")."""
    field = getattr(e, "field", None)
    return Problem(field_message(Problem(str(e), field), FIELD_LABELS, (form or {}).get(field, 0)), field)


def read_settings(loader: Loader, form: dict, session: Session):
    """The form as the run's settings on the models in use, or a Problem (no models yet, a bad field)."""
    if loader.pair is None:
        return Problem(NOT_READY)
    loader.serve(session)
    try:
        return parse_form(form, loader.pair)
    except ConfigError as e:
        return problem(e, form)


def busy(loader: Loader) -> bool:
    """Another session's round holds the models."""
    pair = loader.pair  # None while the models are being switched
    return pair is not None and pair.lock.locked()


def follow(worker: Worker, view, gens: list) -> Iterator:
    """Views of the work in progress, only when a round has ended (or a wait began), and at most one
    every REFRESH_S seconds per REFRESH_TOKENS tokens on show. The engine never waits for the page.
    ``view(waiting)`` builds one."""
    seen, interval = 0, REFRESH_S  # nothing to show before the first round ends
    while not worker.wait(interval):
        n, waiting = sum(len(g.rounds) for g in gens), worker.waiting
        if n != seen or waiting:
            seen = n
            yield view(waiting)
        tokens = max(sum(len(r.emitted) for r in g.rounds) for g in gens)
        interval = REFRESH_S * max(1.0, tokens / REFRESH_TOKENS)


def stop(session: Session) -> str:
    """End the session's run or comparison: before its next round, or inside a long prefill."""
    if not session.running:
        return "Nothing is running."
    session.stop_runs()
    return "Stopping..."


def adaptive_note(settings) -> str:
    """A sentence where the form asks for Adaptive K but the drafter is one it does not pace (prompt lookup,
    the suffix tree, the self-drafter, verifier only): otherwise it would be ignored in silence."""
    from specdec.decode.registry import DRAFTERS
    kind = DRAFTERS.get(settings.drafter)
    if not settings.decode.adaptive or kind is None or kind.paced:
        return ""
    paced = ", ".join(d.label for d in DRAFTERS.values() if d.paced)
    return (f" Adaptive K does not apply to the {kind.label} drafter (it paces only the {paced} drafters): every "
            "round drafts as that drafter does.")


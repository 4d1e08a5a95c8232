"""The app's handlers called as the page calls them, for the UI tests without a browser."""
from __future__ import annotations

from specdec_ui import handlers as h
from specdec_ui.state import form_defaults

PROMPT = "w1 w2 w3 w4 w1 w2 w3"


def form(**kw) -> dict:
    """The app's form; confidence 0: every round drafts exactly K."""
    return {**form_defaults(), "prompt": PROMPT, "k": 4, "confidence": 0.0, "temperature": 1.0,
            "max_new_tokens": 16, **kw}


def step(loader, action, session, values):
    """The step handler's last view (it first yields a waiting view when the models are busy)."""
    return list(h.step(loader, action, session, values))[-1]



"""The app's handlers called as the page calls them, and what a reader sees of their HTML, for the UI
tests without a browser (tests/ui; the fixtures are in tests/ui/conftest.py)."""
from __future__ import annotations

import html
import re

from specdec import DecodeConfig, SamplingConfig
from specdec.decode.start import start
from specdec_ui.state import form_defaults
from specdec_ui.tabs import step as step_tab

PROMPT = "w1 w2 w3 w4 w1 w2 w3"


def form(**kw) -> dict:
    """The app's form; confidence 0: every round drafts exactly K."""
    return {**form_defaults(), "prompt": PROMPT, "k": 4, "confidence": 0.0, "temperature": 1.0,
            "max_new_tokens": 16, **kw}


def tree_form(**kw) -> dict:
    """The form with the tree drafter, W = 3 and N = 10."""
    return form(**{"drafter": "tree", "tree_width": 3, "tree_nodes": 10, **kw})


def step(loader, action, session, values):
    """The step handler's last view (it first yields a waiting view when the models are busy)."""
    return list(step_tab.step(loader, action, session, values))[-1]


def generation(pair, seed=0, temperature=1.0, drafter="model", top_k=0, top_p=1.0):
    """A whole seeded run of 24 tokens at K = 4, every round drafting all four."""
    cfg = DecodeConfig(max_new_tokens=24, k=4, confidence=0.0, seed=seed,
                       sampling=SamplingConfig(temperature, top_k, top_p))
    return start(pair, PROMPT, cfg, drafter).run()


def shown_tokens(page: str) -> list[tuple[str, str]]:
    """(kind, text) of every token element of a token view (a rejected draft's text is inside it)."""
    return [(kind, html.unescape(re.sub(r"<[^>]+>", "", text))) for kind, text in re.findall(
        r'<(?:span|del) class="tok tok-(\w+)"[^>]*>(.*?)</(?:span|del)>(?=<(?:span|del) class="tok |</div>)', page,
        re.S)]


def visible_text(page: str) -> str:
    """What a reader sees of a token view, rejected drafts as markers, as text: every element but
    the ``<del>`` drafts, tags dropped, entities decoded."""
    kept = re.sub(r"<del [^>]*>.*?</del>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", kept))


def html_text(cell: str) -> str:
    """An HTML fragment's text, tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", cell))

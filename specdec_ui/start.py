"""Start here: the lesson as five numbered steps above the tabs, each a click that opens the right tab with
the right settings in the sidebar and says in one sentence what to look at.

The steps follow the tabs' order: the rule on six words (Rule, no models needed), one real round (Step
through), a whole run (Run), the race (Compare), then the lab. The block is an accordion whose open or
closed state the browser remembers (``localStorage``), so it stays out of the way of someone who knows the app.
"""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .state import FORM, form_defaults

RULE, STEP, RUN, COMPARE = "rule", "step", "run", "compare"  # the tabs it opens (page.TABS), in the lesson's order
REMEMBERED = "specdec-start-here"  # localStorage: "closed" once the learner closed the block
# The page is drawn with the block open; where it was closed before, it is closed again by its own header
# (a click, so that gradio's state of the accordion stays true).
CLOSE_IF_CLOSED_BEFORE = f"""() => {{ if (localStorage.getItem('{REMEMBERED}') === 'closed')
  setTimeout(() => document.querySelector('#start-here > .label-wrap.open, #start-here .label-wrap.open')?.click(), 0);
}}"""
TITLE = "Start here: speculative decoding in five steps"
INTRO = "Each step opens its tab and sets the sidebar for it; then do what it says."


@dataclass(frozen=True)
class Step:
    button: str          # the button's words
    tab: str             # the tab it opens
    look: str            # what to do and look at there, one sentence
    settings: dict | None = None  # the sidebar's values it sets (None: leaves them)
    all_k: bool = True   # Step through drafts all K tokens every round


def steps(prompt: str) -> tuple[Step, ...]:
    """The path; ``prompt`` is the page's default prompt, which every step with models uses."""
    defaults = {**form_defaults(), "prompt": prompt}
    return (
        Step("1 · The rule on six words", RULE,
             "Drag a q slider: watch where p and q overlap (β) and what the residual gives back; then press "
             "**Sample M times** to see the rule land on p and a classic bug miss it."),
        Step("2 · One real round", STEP,
             "Press **Draft**, **Verify**, **Accept/reject**, **Commit and roll back** in turn: six drafts, the "
             "verifier's p for all of them from one forward, which are kept, and what replaced the first one rejected.",
             defaults),
        Step("3 · A whole run", RUN,
             "Press **Run**: every round colour-coded in the text (kept, rejected, resampled, bonus), then the time "
             "each round spent drafting and verifying.", defaults),
        Step("4 · Side by side", COMPARE,
             "Press **Run both**: the verifier alone against speculative decoding on the same prompt, the same "
             "tokens at temperature 0, and the speed-up on this machine.", defaults),
        Step("5 · The lab", STEP,
             "Temperature 0.8 is set: step a round and watch the draw u against p/q; then change one thing at a time "
             "in the sidebar: the drafter *model, as a token tree*, **Draft noise** 0.5 (a worse draft: fewer kept, "
             "the same output), or the *Rename* example prompt with prompt lookup.",
             {**defaults, "temperature": 0.8}),
    )


def build(prompt: str) -> tuple[gr.Accordion, list[tuple[Step, gr.Button]]]:
    """The accordion and its steps' buttons (wired by :func:`wire` once the tabs exist)."""
    with gr.Accordion(TITLE, open=True, elem_id="start-here", elem_classes=["spec-start"]) as block:
        gr.Markdown(INTRO, elem_classes=["spec-note"])
        buttons = []
        for s in steps(prompt):
            with gr.Row(equal_height=True, elem_classes=["spec-start-step"]):
                b = gr.Button(s.button, size="sm", scale=0, min_width=190, elem_classes=["spec-start-b"])
                gr.Markdown(s.look, elem_classes=["spec-start-look"])
            buttons.append((s, b))
    return block, buttons


# Opens a tab as a click on it would, and scrolls the page to the tab row, so that the tab's controls are on
# screen under the path (the block above them is taller than a laptop's screen is left with).
OPEN_TAB = ("() => {{ const tab = document.querySelector('[role=tab][data-tab-id=\"{tab}\"]'); if (!tab) return; "
            "tab.click(); tab.closest('.tab-wrapper')?.scrollIntoView({{block: 'start'}}); }}")


def wire(demo: gr.Blocks, block: gr.Accordion, buttons, form: dict, all_k: gr.Checkbox) -> None:
    """Each button sets the form and opens its tab; the accordion's state is kept in the browser."""
    for s, b in buttons:
        opened = OPEN_TAB.format(tab=s.tab)
        if s.settings is None:
            b.click(None, None, None, js=opened)
            continue
        values = [s.settings[name] for name in FORM] + ([s.all_k] if s.tab == STEP else [])
        outputs = [form[name] for name in FORM] + ([all_k] if s.tab == STEP else [])
        b.click(lambda values=values: values, None, outputs, show_progress="hidden", queue=False).then(
            None, None, None, js=opened)
    for event, state in ((block.expand, "open"), (block.collapse, "closed")):
        event(None, None, None, js=f"() => localStorage.setItem('{REMEMBERED}', '{state}')")
    demo.load(None, None, None, js=CLOSE_IF_CLOSED_BEFORE)

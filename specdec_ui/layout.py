"""The page: a header, the settings in a sidebar, and one function per tab.

Each tab builds one component per field of its view record (:mod:`.views`) and shows a record by
those fields. A :class:`~.views.Problem` changes nothing the page shows but the message at the
field it concerns (the field's hint line turns into the message), an alert next to the buttons
(where a narrow screen, whose sidebar is closed, still shows it) and the sidebar, opened. One
message per mistake, no toast: the field is checked as it is edited, with the run's own check, and
its message and the alerts about it go as soon as it holds a value a run takes.
"""
from __future__ import annotations

from dataclasses import fields
from functools import partial
from html import escape

import gradio as gr

from specdec import ConfigError, ModelChoice

from . import charts, figure_views, notebooks, rule_tab, start
from . import handlers as h
from .charts import COLORS
from .state import (
    FIELD_LABELS,
    FIELDS,
    FORM,
    HINTS,
    MODEL_CHOICES,
    MODEL_FIELDS,
    MODEL_FORM,
    Loader,
    Session,
    check_field,
    form_defaults,
    model_values,
)
from .views import (
    REAL_TREE,
    REAL_TREE_BUTTON,
    UNCHANGED,
    CompareView,
    Problem,
    Replayed,
    RunView,
    SampleView,
    StepView,
    legend_html,
    plain_html,
)

EXAMPLES = [
    # the default: on the embedded pair its first round drafts six tokens, keeps five and replaces the sixth
    ["Write a Python function that returns the n-th Fibonacci number iteratively. Reply with the code only.",
     "model"],
    ["Write a Python function that checks whether a number is prime.", "model"],
    ["Write a SQL query that returns the ten customers with the highest total order value.", "model"],
    ["Rename the variable `x` to `total` in this function and return the full code:\n\n"
     "def add_all(items):\n    x = 0\n    for item in items:\n        x = x + item\n    return x\n", "lookup"],
    ["In three sentences, explain why the sky is blue.", "model"],
]
INTRO = ("**Speculative decoding, step by step.** A small *draft* model proposes K tokens; the *verifier* checks "
         "them in one forward pass and keeps a leading run, so the output is distributed exactly as the verifier's "
         "own (Leviathan et al. 2023). **p** = verifier, **q** = draft. Settings: the sidebar.")
NOTEBOOK_LINES = {
    "01_the_rule": "the rule by hand on made-up p and q (the Rule tab, live): β = Σ min(p, q), the residual, three classic bugs",
    "02_one_real_round": "one real round of the embedded pair, every number of this page's Step through tab",
    "03_acceptance": "acceptance over K × temperature, every definition side by side, the best K for this machine",
    "04_optimisation_journey": "from transformers' generate() to this engine: which speed-ups help here and why",
    "05_runtime_vs_algorithm": "the same models in llama.cpp: when a verification costs about one step",
    "06_token_trees": "token trees: the draft's second guess, the tree rule by hand, the mask, when trees pay here",
}
# Every kind of token has a colour and a second cue: rejected drafts are a red pin between characters
# (or, inline, struck through: <del>), resampled tokens have a dashed underline, bonus tokens a double
# one, accepted drafts a solid one, verifier-only tokens none. Whitespace markers are CSS content: seen
# on request, never copied.
WRAP_INDENT = "5ch"
PIN = ("linear-gradient(#b91c1c, #b91c1c) 50% 0 / 2px 100% no-repeat, "
       "radial-gradient(circle at 50% 3px, #b91c1c 3px, transparent 3.5px)")  # a line with a round head
CSS = f"""
.spec-tokens, .spec-plain {{ line-height: 1.9; white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas,
  monospace; font-size: 14px; margin: 0; color: #111827; }}
/* a line too long for the box goes on indented by {WRAP_INDENT}, an odd indentation code seldom has: code keeps
   its shape, and every character stays in the text (selected and copied as it is) */
.spec-tokens, .spec-plain {{ text-indent: {WRAP_INDENT} each-line hanging; }}
.spec-plain {{ background: #f9fafb; padding: 8px; border-radius: 6px; max-height: 360px; overflow: auto; }}
.spec-empty {{ color: #4b5563; font-style: italic; }}
.tok {{ color: #111827; border-radius: 3px; padding: 1px 0; text-decoration-thickness: 2px; position: relative; }}
.tok:focus {{ outline: 3px solid #1d4ed8; outline-offset: 1px; }}
.tok:focus::after, .tok:hover::after {{ content: attr(aria-label); position: absolute; left: 0; top: 1.7em; z-index: 20;
  width: max-content; max-width: min(340px, 80vw); white-space: normal; text-indent: 0; background: #111827;
  color: #ffffff;
  font: 12px/1.4 system-ui, sans-serif; padding: 4px 8px; border-radius: 4px; text-decoration: none; }}
@media (max-width: 600px) {{  /* a phone: the story in a bar along the bottom, never cut by the screen's edge */
  .tok:focus::after, .tok:hover::after {{ position: fixed; left: 8px; right: 8px; top: auto; bottom: 8px;
    width: auto; max-width: none; }}
}}
.tok-accepted {{ background: {COLORS['accepted']}; border-bottom: 2px solid #15803d; }}
.tok-rejected {{ background: {COLORS['rejected']}; text-decoration: line-through; font-size: 11px;
  vertical-align: super; line-height: 1; padding: 0 2px; margin: 0 1px; white-space: nowrap; }}
.tok-resampled {{ background: {COLORS['resampled']}; border-bottom: 2px dashed #92400e; }}
.tok-bonus {{ background: {COLORS['bonus']}; border-bottom: 4px double #1e40af; }}
.tok-plain {{ background: {COLORS['plain']}; }}
/* rejected drafts as markers (the default): the draft's text is hidden and a red pin, wider to the
   pointer than to the eye, stands on the boundary where it was replaced; it adds no width. Gradio
   repeats every rule under its container's classes, which outranks a rule scoped by the page's
   class: the switch's overrides are !important */
body:not(.rejected-inline) .spec-tokens .tok-rejected {{ background: none !important; text-decoration: none !important;
  padding: 0 !important; margin: 0 !important; vertical-align: baseline !important; font-size: inherit !important;
  line-height: inherit !important; }}
body:not(.rejected-inline) .spec-tokens .tok-rejected .rej-text {{ display: none; }}
body:not(.rejected-inline) .spec-tokens .tok-rejected::before,
body:not(.rejected-inline) .spec-legend .tok-rejected::before {{ content: ""; position: absolute; left: -5px;
  width: 10px; top: -0.1em; bottom: -0.1em; z-index: 1; background: {PIN}; cursor: help; }}
body:not(.rejected-inline) .spec-tokens .tok-rejected:focus {{ outline: none !important; }}
body:not(.rejected-inline) .spec-tokens .tok-rejected:focus::before {{ outline: 3px solid #1d4ed8; }}
body:not(.rejected-inline) .spec-legend .tok-rejected {{ background: none !important; text-decoration: none !important;
  padding-left: 14px !important; }}
body:not(.rejected-inline) .spec-legend .tok-rejected::before {{ left: 1px; }}
.sp, .tab, .nl {{ position: relative; }}
:is(.show-whitespace, .tok-rejected) .sp::before {{ content: "·"; position: absolute; left: 0; right: 0;
  text-align: center; color: #6b7280; }}
:is(.show-whitespace, .tok-rejected) .tab::before {{ content: "→"; position: absolute; left: 0; color: #6b7280; }}
:is(.show-whitespace, .tok-rejected) .nl::before {{ content: "↵"; color: #6b7280; }}
.tok-rejected .sp::before, .tok-rejected .tab::before {{ position: static; }}
.spec-legend, .spec-ready {{ font-size: 13px; margin: 0; }}
/* the legend, then the text switches where they fit, as words: no boxes, small pills */
.spec-key {{ align-items: center; flex-wrap: wrap !important; row-gap: 4px; }}
.spec-key > .block {{ flex: 0 0 auto !important; min-width: 0 !important; }}
.spec-key :is(.block, .form) {{ border: none !important; box-shadow: none !important; padding: 0 !important;
  background: none !important; }}
.spec-key > .block:first-child {{ flex: 1 1 300px !important; min-width: min(300px, 100%) !important; }}
.spec-key fieldset.block {{ display: flex; flex-wrap: wrap; align-items: center; gap: 4px 8px; }}
.spec-key fieldset [data-testid="block-info"] {{ margin: 0; font-size: 13px; color: #111827; }}
.spec-key fieldset label {{ padding: 2px 8px !important; font-size: 13px; }}
.spec-key .checkbox-container {{ font-size: 13px; }}
/* an accordion's arrow keeps its size beside a label that wraps (at 400 px it was squeezed away);
   the two accordions stack on a narrow screen */
.label-wrap .icon {{ flex-shrink: 0; align-self: center; margin-left: 8px; }}
@media (max-width: 600px) {{ .row.spec-about {{ flex-direction: column; }} }}
/* an empty Markdown or HTML block takes no room, nor the gap around it: no blank band before results */
.block:has(> div > .prose > span.md:empty), .block:has(> .html-container > .prose:empty) {{ display: none; }}
.spec-legend .tok {{ margin-right: 6px; padding: 1px 4px; font-size: 13px; vertical-align: baseline; }}
.field-error textarea, .field-error input {{ border-color: #b91c1c !important; }}
.field-error .info, .field-error span[data-testid="block-info"] + div {{ color: #b91c1c !important; }}
.spec-alert p {{ color: #991b1b; font-weight: 600; margin: 0; }}
/* gradio's container hides its overflow, which makes it the scroll box every sticky element sticks to
   (and it never scrolls): clip sideways instead, which makes no scroll box, so the controls stick */
.gradio-container {{ overflow-x: clip !important; overflow-y: visible !important; }}
.spec-controls {{ position: sticky; top: 0; z-index: 30; background: var(--background-fill-primary);
  padding: 6px 0; border-bottom: 1px solid #e5e7eb; }}
button:focus-visible, [role="tab"]:focus-visible {{ outline: 3px solid #111827 !important; outline-offset: 2px; }}
.step-b {{ font-size: 15px !important; line-height: 1.2 !important; padding-left: 6px !important;
  padding-right: 6px !important; }}
.skip-link {{ position: absolute; left: -9999px; }}
.skip-link:focus {{ position: static; display: inline-block; padding: 4px 8px; background: #111827; color: #ffffff;
  border-radius: 4px; }}
.spec-table {{ overflow-x: auto; }}
.spec-table table {{ border-collapse: collapse; font-size: 13px; width: 100%; }}
.spec-table table, .spec-table tr {{ border: 0; }}  /* gradio's prose boxes every cell in a dark line */
.spec-table th, .spec-table td {{ border: 0; border-bottom: 1px solid #e5e7eb; padding: 3px 6px; text-align: left;
  color: #111827; }}
.spec-table caption {{ text-align: left; font-weight: 600; padding-bottom: 4px; color: #111827; }}
.spec-table td.dash {{ color: #4b5563; }}
.spec-table tr.row-accepted th {{ border-left: 4px solid #16a34a; }}
.spec-table tr.row-rejected th {{ border-left: 4px solid #dc2626; }}
.spec-table tr.row-unreached th, .spec-table tr.row-after_stop th {{ border-left: 4px solid #9ca3af; }}
.spec-table tr.row-resampled th {{ border-left: 4px solid #d97706; }}
.spec-table tr.row-bonus th {{ border-left: 4px solid #2563eb; }}
.spec-tree-title {{ font-weight: 600; margin: 0 0 2px 0; color: #111827; }}
.spec-tree-box {{ overflow: auto; max-height: 70vh; border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px;
  background: #ffffff; }}
.spec-tree-box svg {{ display: block; }}
.spec-tree-box text {{ fill: #111827; white-space: pre; }}
.tree-node:focus {{ outline: none; }}
.tree-node:focus rect {{ stroke: #111827; stroke-width: 3; }}
.tree-key {{ display: inline-block; margin-right: 10px; }}
.tree-swatch {{ display: inline-block; width: 11px; height: 11px; border: 2px solid; border-radius: 2px;
  margin-right: 4px; vertical-align: -1px; }}
.spec-mask table {{ width: auto; font-size: 11px; }}
.spec-mask th, .spec-mask td {{ padding: 0 3px; text-align: center; line-height: 1.3; }}
.spec-mask tbody th {{ text-align: left; white-space: nowrap; }}
.spec-mask td {{ border: 1px solid #e5e7eb; min-width: 12px; }}
.spec-mask td.on {{ background: #dbeafe; color: #1e3a8a; }}
@media (max-width: 600px) {{
  .spec-table table {{ font-size: 11px; }}
  .spec-table th, .spec-table td {{ padding: 2px 3px; }}
  /* the sibling tests' ten columns do not fit: each test is a card, every value beside its column's
     name (the header row stays for screen readers) */
  .spec-tests table {{ font-size: 12px; }}
  .spec-tests table, .spec-tests tbody, .spec-tests caption {{ display: block; }}
  .spec-tests thead {{ position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); }}
  .spec-tests tr {{ display: grid; grid-template-columns: 1fr 1fr; column-gap: 10px; padding: 4px 0 4px 6px;
    border-bottom: 1px solid #e5e7eb; border-left: 4px solid #9ca3af; margin-bottom: 4px; }}
  .spec-tests tr :is(th, td) {{ border: none !important; padding: 1px 0 !important; line-height: 1.35; }}
  .spec-tests tr th {{ grid-column: 1 / -1; }}
  .spec-tests td::before {{ content: attr(data-label) ": "; color: #4b5563; }}
  .spec-tests td.wide {{ grid-column: 1 / -1; }}
  .spec-tests tr.row-accepted {{ border-left-color: #16a34a; }}
  .spec-tests tr.row-rejected {{ border-left-color: #dc2626; }}
  .spec-tests tr.row-resampled {{ border-left-color: #d97706; }}
  .spec-tests tr.row-bonus {{ border-left-color: #2563eb; }}
}}
.spec-note {{ font-size: 12px; color: #374151; margin: 4px 0 0 0; }}
/* Start here: a compact numbered path, a button and its sentence per line; stacked on a phone */
.spec-start-step {{ align-items: center; flex-wrap: nowrap !important; gap: 8px !important; margin: 0 !important; }}
.spec-start-b {{ justify-content: flex-start !important; font-weight: 700 !important; }}
.spec-start-look p {{ margin: 0; font-size: 14px; }}
@media (max-width: 600px) {{ .row:is(.spec-start-step, .spec-all-k) {{ flex-direction: column; align-items: stretch; }}
  .row.spec-start-step {{ gap: 2px !important; margin-bottom: 6px !important; }} }}
.spec-details summary {{ cursor: pointer; font-weight: 700; color: #1d4ed8; }}
.spec-all-k {{ align-items: center; }}
.live-charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.live-chart {{ margin: 0; flex: 1 1 300px; min-width: 0; }}
.live-chart figcaption {{ font-size: 13px; font-weight: 600; color: #111827; margin-bottom: 4px; }}
.live-plot {{ display: flex; align-items: flex-end; gap: 1px; height: {charts.LIVE_HEIGHT}px; overflow: hidden;
  border-bottom: 1px solid #6b7280; }}
.live-times a {{ flex: 0 0 5px; }}
.live-tests a {{ flex: 0 0 4px; background-repeat: no-repeat; background-color: transparent !important;
  background-image: linear-gradient(#111827, #111827), linear-gradient(var(--c), var(--c));
  background-size: 100% 2px, 100% var(--bar); background-position: 0 calc(100% - var(--u)), 0 100%; }}
.live-tests a.no-u {{ background-image: linear-gradient(var(--c), var(--c)); background-size: 100% var(--bar);
  background-position: 0 100%; }}
.live-tests a.v-accepted {{ --c: {charts.BAR["accepted"]}; }}
.live-tests a.v-rejected {{ --c: {charts.BAR["rejected"]}; }}
.live-legend {{ font-size: 12px; color: #374151; margin-top: 2px; }}
.live-key {{ display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 8px; vertical-align: middle; }}
.live-u {{ background: #111827; height: 2px; }}
.race-row {{ display: flex; align-items: center; gap: 8px; font-size: 13px; margin: 4px 0; }}
.race-name {{ flex: 0 0 110px; }}
.race-bar {{ display: inline-block; height: 14px; border-radius: 2px; }}
/* Compare: the verdict as a badge (colour, icon and words; text at least 7:1 on its fill), then the
   outputs token for token: the shared start once, then a column per position, one row per output */
.cmp-verdict {{ display: flex; gap: 10px; align-items: flex-start; padding: 10px 14px; border: 2px solid;
  border-radius: 10px; font-size: 15px; line-height: 1.4; }}
.cmp-verdict strong {{ color: inherit !important; font-size: 17px; }}
.cmp-verdict-icon {{ font-size: 24px; line-height: 1; font-weight: 700; }}
.cmp-verdict-detail {{ display: block; font-size: 13px; margin-top: 2px; }}
.cmp-identical {{ background: #dcfce7; border-color: #15803d; color: #14532d; }}
.cmp-differ {{ background: #fee2e2; border-color: #b91c1c; color: #7f1d1d; }}
.cmp-by-design {{ background: #dbeafe; border-color: #1d4ed8; color: #1e3a8a; }}
.cmp-aligned {{ max-height: 480px; overflow: auto; border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px;
  background: #ffffff; }}
.cmp-al-key {{ font-size: 13px; color: #374151; margin: 0 0 6px 0; }}
.cmp-same, .cmp-grid {{ font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 14px; color: #111827; }}
.cmp-same {{ white-space: pre-wrap; line-height: 1.7; border-left: 4px solid #15803d; padding-left: 8px;
  margin-bottom: 10px; }}
.cmp-grid {{ display: flex; flex-wrap: wrap; align-items: flex-start; }}
/* room above each line for the first difference's label; a margin, not a row gap, so a line break
   (a flex line of its own) adds no space */
.al-col {{ display: inline-flex; flex-direction: column; position: relative; margin-top: 1.1em; }}
.al-cell {{ white-space: pre; line-height: 1.5; min-height: 1.5em; min-width: 0.6em; padding: 0 1px; }}
.al-r1 {{ background: #eff6ff; }}
.al-r2 {{ background: #f5f3ff; }}
.al-cell.al-diff {{ background: #fee2e2; font-weight: 700; text-decoration: underline 2px #b91c1c;
  text-underline-offset: 3px; }}
.al-cell.al-none {{ background: repeating-linear-gradient(45deg, #f3f4f6 0 3px, #ffffff 3px 6px); }}
.al-key {{ font-family: system-ui, sans-serif; font-size: 12px; color: #374151; padding-right: 6px; }}
.al-first {{ outline: 2px solid #b91c1c; outline-offset: 1px; }}
.al-first::before {{ content: "▼ token " attr(data-n); position: absolute; bottom: 100%; left: 0; font: 11px/1.3
  system-ui, sans-serif; color: #991b1b; white-space: nowrap; }}
.al-br {{ flex-basis: 100%; height: 0; }}
.cmp-grid .sp::before {{ content: "·"; position: absolute; left: 0; right: 0; text-align: center; color: #6b7280; }}
.cmp-grid .tab::before {{ content: "→"; position: absolute; left: 0; color: #6b7280; }}
.cmp-grid .nl::before {{ content: "↵"; color: #6b7280; }}
.cmp-copy-title {{ font-weight: 600; margin: 8px 0 2px 0; color: #111827; }}
/* at 400 px gradio's roomy tab padding pushed Compare (and after a resize, Rule) into a "More tabs" menu: the
   four tabs fit as tabs with less (gradio measures its hidden copy of the row, which this narrows too) */
@media (max-width: 600px) {{ .tab-container button {{ padding-left: 8px !important; padding-right: 8px !important; }} }}
/* the chosen tab reads at 6.7:1 (gradio's accent on white was 3.7:1) */
[role="tab"][aria-selected="true"] {{ color: #1d4ed8 !important; }}
/* gradio's footer links, 1.9:1 in its pale grey: the hints' grey, 7.6:1 */
footer, footer :is(a, button, div) {{ color: #4b5563 !important; opacity: 1 !important; }}
@media (max-width: 600px) {{
  .rule-main > .column:last-child {{ order: -1; }}  /* the Rule tab's chart and numbers, then its sliders */
}}
/* gradio's open sidebar on a narrow screen is 100vw wide, its close button at the right edge, over the
   settings' scrollbar: as wide as the page beside the page's scrollbar, the button in a column of its own */
@media (max-width: 768px) {{
  .sidebar:not(.right) {{ width: 100% !important; left: -100% !important; }}
  .sidebar.open:not(.right) .sidebar-content {{ margin-right: var(--size-7); padding-right: var(--size-3); }}
}}
""" + charts.LIVE_CSS
# Gradio's Source Sans Pro and IBM Plex Mono at weight 600 are subsets of a few letters: a semibold
# label ("Accept/reject") drew its "A" in one font and the rest in another. Bold (700), a whole font,
# serves every heavy weight instead.
FONTS = dict(font=[gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif", "system-ui",
                   "sans-serif"],
             font_mono=[gr.themes.LocalFont("IBM Plex Mono", weights=(400, 700)), "ui-monospace", "Consolas",
                        "monospace"])
THEME = gr.themes.Default(primary_hue="blue", **FONTS).set(
    # white text on these fills is at least 4.5:1 (WCAG AA): #1d4ed8 6.7:1, #b91c1c 6.5:1
    button_primary_background_fill="#1d4ed8", button_primary_background_fill_hover="#1e40af",
    button_primary_text_color="#ffffff", button_cancel_background_fill="#b91c1c",
    button_cancel_background_fill_hover="#991b1b", button_cancel_text_color="#ffffff",
    block_info_text_color="#4b5563")  # field hints: 7.6:1 on white
PLOT_MIN_WIDTH = 360
TREE_ONLY = ("tree", "tests", "mask")  # StepView's HTML fields that only a tree round fills
COLUMN_MIN_WIDTH = 280  # three Compare columns side by side beside the open sidebar at 1280 px
# On a phone-sized window the open sidebar would cover the page: start it closed there.
CLOSE_SIDEBAR_WHEN_NARROW = """() => setTimeout(() => {
  if (window.innerWidth < 900) document.querySelector('.sidebar.open .toggle-button')?.click();
}, 300)"""
# The page-wide switches toggle a class on the page, so no text is sent again.
REJECTED_DRAFTS = "(how) => { document.body.classList.toggle('rejected-inline', how === 'inline'); }"
SHOW_WHITESPACE = "(show) => { document.body.classList.toggle('show-whitespace', show); }"
# A message at a field the sidebar has scrolled away from (a long form, a phone) is brought into
# view once the sidebar has opened.
SHOW_FIELD_ERROR = ("() => setTimeout(() => document.querySelector('.field-error')?.scrollIntoView({block: 'nearest'}), "
                    "400)")


def build_demo(loader: Loader) -> gr.Blocks:
    charts.warm_up()
    with gr.Blocks(title="Speculative decoding") as demo:
        gr.HTML('<a class="skip-link" href="#start-here">Skip to Start here</a>')
        gr.Markdown(INTRO)
        session = gr.State(lambda: Session())  # a callable: a fresh Session per browser session
        with gr.Sidebar(open=True, label="Settings") as sidebar:
            form = _settings(loader)
        path = start.build(EXAMPLES[0][0])
        header = _header(loader)
        needs_models = []
        with gr.Tabs():  # in the order of the lesson
            rule_tab.build(session, start.RULE)
            step_buttons, all_k, step_replayed = _step_tab(loader, session, form, sidebar)
            needs_models += step_buttons
            needs_models += _run_tab(loader, session, form, sidebar, step_replayed)
            needs_models += _compare_tab(loader, session, form, sidebar)
        start.wire(demo, *path, form, all_k)
        _poll_loading(demo, loader, header, needs_models)
        demo.load(None, None, None, js=CLOSE_SIDEBAR_WHEN_NARROW)
    return demo


def _header(loader: Loader) -> tuple:
    progress = gr.HTML(_progress_html(loader))
    timer = gr.Timer(0.5)
    with gr.Row(equal_height=True, elem_classes=["spec-about"]):
        with gr.Accordion("Models, precision and parameter counts", open=False):
            info = gr.Markdown(_info(loader))
            model_buttons = _model_form(loader, timer)
        with gr.Accordion("Notebooks: the same lessons, measured", open=False):
            gr.Markdown(_notebooks())
    with gr.Row(elem_classes=["spec-key"]):
        gr.HTML(legend_html())
        # switches for every tab's text, each as wide as its words (the CSS's .spec-key)
        rejected = gr.Radio([("as markers", "markers"), ("inline", "inline")], value="markers",
                            label="Rejected drafts:")
        whitespace = gr.Checkbox(False, label="show whitespace as · → ↵", container=False)
    rejected.change(None, rejected, None, js=REJECTED_DRAFTS)
    whitespace.change(None, whitespace, None, js=SHOW_WHITESPACE)
    return info, progress, timer, model_buttons


MODEL_FORM_INTRO = ("**Another pair**, named as on the command line (`--target`, `--draft`, ...): an embedded model, "
                    "a Hugging Face id already in this machine's cache (nothing is downloaded), a local directory or "
                    "a .gguf file. The pair in use is released first, to make room; every session's step-through "
                    "restarts on the new pair, and if it cannot be loaded, the pair in use comes back.")


def _model_form(loader: Loader, timer: gr.Timer) -> list:
    """The fields of ModelChoice, filled with the choice in use, and the buttons that load a pair;
    a refused value is answered at its field and in an alert, as in the sidebar."""
    gr.Markdown(MODEL_FORM_INTRO)
    values = model_values(loader.models)
    fields = {}
    for o in MODEL_FIELDS:
        if o.name in MODEL_CHOICES:
            fields[o.name] = gr.Radio(list(MODEL_CHOICES[o.name]), value=values[o.name], label=FIELD_LABELS[o.name],
                                      info=HINTS[o.name])
        else:
            fields[o.name] = gr.Textbox(values[o.name], label=FIELD_LABELS[o.name], info=HINTS[o.name], max_lines=1)
    with gr.Row():
        load_b = gr.Button("Load these models", variant="primary", min_width=160)
        embedded_b = gr.Button("Back to the embedded pair", min_width=160)
    status = gr.Markdown()
    alert = gr.Markdown(elem_classes=["spec-alert"])
    outputs = [*fields.values(), status, alert, timer]

    def show(result) -> list:
        bad = result.field if isinstance(result, Problem) else None
        hints = [gr.update(info=result.message if name == bad else HINTS[name],
                           elem_classes=["field-error"] if name == bad else []) for name in MODEL_FORM]
        if isinstance(result, Problem):
            return hints + ["", f"⚠ {result.message}", gr.Timer(active=True)]
        return hints + [result, "", gr.Timer(active=True)]

    def load(*values):
        for result in h.load_models(loader, dict(zip(MODEL_FORM, values))):
            yield show(result)
    load_b.click(load, list(fields.values()), outputs, concurrency_limit=1, concurrency_id="load-models")
    embedded = list(model_values(ModelChoice()).values())
    embedded_b.click(lambda: embedded, None, list(fields.values()), queue=False).then(
        load, list(fields.values()), outputs, concurrency_limit=1, concurrency_id="load-models")
    # a page opened after a switch shows the choice in use, not the one the app started with
    gr.on(None, lambda: list(model_values(loader.models).values()), None, list(fields.values()))
    for name, component in fields.items():  # a fixed value loses its red message at once
        component.input(partial(_hint, name), None, component, show_progress="hidden", queue=False)
    return [load_b, embedded_b]


def _notebooks() -> str:
    """A link per notebook to its page: its last run here, else its text (no figures), else its title alone."""
    rows = []
    for name, line in NOTEBOOK_LINES.items():
        title = escape(notebooks.title(name))
        run = notebooks.run_page(name)
        page = run if run.exists() else notebooks.text_page(name)
        if not page.exists():
            rows.append(f"* {title} (not rendered yet): {line}")
            continue
        note = "" if page == run else " (not run yet: no figures)"
        rows.append(f'* <a href="{notebooks.href(page)}" target="_blank" rel="noopener">{title}</a>{note}: {line}')
    unrun = not all(notebooks.run_page(name).exists() for name in NOTEBOOK_LINES)
    return ("Each opens in a new tab as a page with its figures, from its last run in this checkout. "
            "`make notebooks` opens the `notebooks/` folder in Jupyter, to run and change them: each imports "
            "this engine and runs top to bottom.\n\n" + "\n".join(rows) +
            ("\n\nNot run here yet: `make notebooks-html` runs each notebook once and writes its page with its "
             "figures (`make test` does too)." if unrun else ""))


def _settings(loader: Loader) -> dict:
    values = {**form_defaults(), "prompt": EXAMPLES[0][0]}
    form = {o.name: _field(o, values[o.name], o.drafters is None or values["drafter"] in o.drafters) for o in FIELDS}
    gr.Examples(EXAMPLES, [form["prompt"], form["drafter"]], label="Example prompts")
    assert tuple(form) == FORM
    some = [o for o in FIELDS if o.drafters]  # shown with their drafters only (the tree's W and N)
    form["drafter"].change(lambda drafter: [gr.update(visible=drafter in o.drafters) for o in some], form["drafter"],
                           [form[o.name] for o in some], show_progress="hidden", queue=False)
    for name, component in form.items():
        component.change(partial(_checked, loader, name), component, component, **AS_EDITED)
    return form


def _field(o, value, visible: bool):
    """The input an option's type asks for: a radio for choices, a text box for text, else a number
    box (integer fields take any number and refuse 2.5 themselves: no silent rounding)."""
    if o.app_choices:
        return gr.Radio([(words, v) for v, words in o.app_choices.items()], value=value, label=o.label,
                        visible=visible)
    if o.type is str:
        return gr.Textbox(value, label=o.label, lines=4, visible=visible)
    assert o.type in (int, float), f"{o.name}: the form has no input for {o.type}"
    return gr.Number(value, label=o.label, info=HINTS[o.name], visible=visible)


# A field is checked whenever its value changes (typed, an example picked, a trace restored), and
# always its last value: a change made while the previous one is checked is checked after it.
AS_EDITED = dict(show_progress="hidden", queue=False, trigger_mode="always_last")


def _mistake(loader: Loader, name: str, value) -> str | None:
    """What a run would say of this one field holding ``value``, in the same words, or None where a
    run would take it."""
    try:
        h._runs(value) if name == "runs" else check_field(name, value, loader.pair)
    except ConfigError as e:
        return h._problem(e, {name: value}).message
    return None


def _hint(name: str, message: str | None = None):
    """The line under a field: the message of its mistake, or its hint."""
    # "" and not None where a field has no hint (the prompt): None would leave the message where it was
    return gr.update(info=message or HINTS.get(name) or "", elem_classes=["field-error"] if message else [])


def _checked(loader: Loader, name: str, value):
    return _hint(name, _mistake(loader, name, value))


def _alert(name: str, message: str) -> str:
    """The pointer by a tab's buttons to a field's message."""
    return f"⚠ {message}" + ("" if name == "runs" else " (the field is in the Settings sidebar)")


def _follow(loader: Loader, name: str, value, about: str | None):
    """A tab's alert and the field it is about, once field ``name`` holds ``value``: an alert about
    that field goes when the value is one a run takes, else says the new value's mistake; an alert
    about anything else stays."""
    if about != name:
        return gr.skip(), gr.skip()
    message = _mistake(loader, name, value)
    return (_alert(name, message), name) if message else ("", None)


def _step_tab(loader, session, form, sidebar) -> tuple:
    with gr.Tab("Step through", id=start.STEP):
        about = gr.State(None)  # the field the alert is about: a state inside its tab (one beside the tabs broke them)
        with gr.Column(elem_classes=["spec-controls"], elem_id="step-controls"):
            with gr.Row():
                buttons = {a: gr.Button(label, min_width=80, size="md", scale=scale, elem_classes=["step-b"])
                           for a, label, scale in (("draft", "Draft", 2), ("verify", "Verify", 2),
                                                   ("accept", "Accept/reject", 3), ("commit", "Commit and roll back", 4))}
                buttons["step"] = gr.Button("Step round", variant="primary", min_width=80, size="md", scale=3,
                                            elem_classes=["step-b"])
                buttons["reset"] = gr.Button("Reset", min_width=80, size="md", scale=2, elem_classes=["step-b"])
            view = {"status": gr.Markdown("Press **Draft** to propose K tokens, then **Verify**, **Accept/reject** "
                                          "and **Commit and roll back**; or **Step round** for a whole round.")}
            alert = gr.Markdown(elem_classes=["spec-alert"])
        with gr.Row(elem_classes=["spec-all-k"]):
            all_k = gr.Checkbox(True, label=h.ALL_K_LABEL, scale=0, min_width=200)
            gr.Markdown(h.ALL_K_WHY, elem_classes=["spec-note"])
        view["banner"] = gr.Markdown()
        with gr.Column(visible=False) as view["real_tree"]:  # when the tree drafter ran the chain
            with gr.Row():
                real_tree_b = gr.Button(REAL_TREE_BUTTON, size="sm", variant="primary", scale=0, min_width=180)
        with gr.Row():
            with gr.Column(min_width=320):
                view["explain"] = gr.Markdown()
                view["table"] = gr.HTML()
                view["cache"] = gr.Markdown()
            with gr.Column(min_width=320):
                view["mask"] = gr.HTML(visible=False)
                view["dist"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
                view["ratio"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["tree"] = gr.HTML(visible=False)  # a tree round's tree: the page's whole width, wide trees scroll inside
        view["tests"] = gr.HTML(visible=False)  # a tree round's sibling tests: ten columns, the page's whole width
        figure = figure_views.figure_section(loader, session)
        view["text"], view["plain"] = _text_views("step")
        with gr.Accordion("Losslessness, seen: run the rule 10,000 times on this round", open=False):
            with gr.Row(equal_height=True):
                picker = gr.Dropdown([], value=None, label="Position to sample (the round's tested positions)",
                                     scale=3)
                sample_b = gr.Button("Sample 10,000 times", size="sm", scale=1)
            sample_alert = gr.Markdown(elem_classes=["spec-alert"])
            sample = {"summary": gr.Markdown(SAMPLE_INTRO),
                      "histogram": gr.Plot(visible=False, show_label=False)}
    outputs, show = _view_outputs(StepView, view, form, alert, sidebar, loader=loader, about=about)

    def fill_picker(s):
        """The picker for the round on show; a sample of a round no longer on show is cleared."""
        choices, default = h.sample_positions(s)
        if not h.sample_is_stale(s):
            return gr.update(choices=choices, value=default), gr.skip(), gr.skip()
        s.sampled = None
        return gr.update(choices=choices, value=default), SAMPLE_INTRO, gr.update(value=None, visible=False)
    refill = dict(fn=fill_picker, inputs=session, outputs=[picker, sample["summary"], sample["histogram"]],
                  show_progress="hidden")
    def stepping(action: str):
        def listener(session_, all_k_, *values):
            for i, result in enumerate(h.step(loader, action, session_, dict(zip(FORM, values)), all_k_)):
                yield show(result, first=i == 0)
        return listener
    for action, button in buttons.items():
        button.click(stepping(action), [session, all_k, *form.values()], outputs).then(
            None, None, None, js=SHOW_FIELD_ERROR).then(**refill).then(**figure)
    # the real tree's shape into the sidebar, then its first round drafted (the change restarts the step-through)
    real_tree_b.click(lambda: REAL_TREE, None, [form["tree_width"], form["tree_nodes"], form["confidence"]],
                      queue=False).then(stepping("draft"), [session, all_k, *form.values()],
                                        outputs).then(**refill).then(**figure)
    sample_outputs, sample_show = _view_outputs(SampleView, sample, {}, sample_alert, None)
    sample_b.click(lambda s, at: sample_show(h.sample(s, at)), [session, picker], sample_outputs)

    def replayed(upload_event, upload) -> None:
        """After a trace is uploaded, this tab switches to it at once: no round of the old run left on show."""
        upload_event.then(lambda s, path: show(h.replayed_step(s, path)), [session, upload], outputs).then(
            **refill).then(**figure)
    return [*buttons.values(), real_tree_b], all_k, replayed


SAMPLE_INTRO = ("After **Accept/reject**, this runs the rule (no model) 10,000 times on the tested position where the "
                "argmax bug lands farthest beyond sampling noise, or on the one you pick, beside the bug.")


def _text_views(prefix: str) -> tuple:
    gr.Markdown("**Text by origin** — hover over or tab to a token, or to a red pin (a rejected draft), for its "
                "numbers")
    text = gr.HTML('<div class="spec-tokens spec-empty">No tokens yet.</div>')
    with gr.Accordion("Plain text (Copy copies the text itself)", open=False):
        plain = gr.HTML(plain_html(""), elem_id=f"{prefix}-plain")
        copy = gr.Button("Copy text", size="sm")
    copy.click(None, None, None, js=f"() => navigator.clipboard.writeText("
                                    f"document.querySelector('#{prefix}-plain pre').innerText)")
    return text, plain


def _run_tab(loader, session, form, sidebar, step_replayed) -> list:
    with gr.Tab("Run", id=start.RUN):
        about = gr.State(None)
        with gr.Row():
            run_b = gr.Button("Run", variant="primary", min_width=90)
            stop_b = gr.Button("Stop run", variant="stop", min_width=90)
            download = gr.DownloadButton("Download trace (JSON)", interactive=False, min_width=90)
        view = {"status": gr.Markdown("Press **Run** to generate, round by round."), "download": download}
        alert = gr.Markdown(elem_classes=["spec-alert"])
        view["text"], view["plain"] = _text_views("run")
        view["live"] = gr.HTML()
        view["stats"] = gr.Markdown()
        with gr.Row():
            view["timing"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["ratio"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        with gr.Row():
            view["acceptance"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["tokens"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["kinds"] = gr.Plot(visible=False, show_label=False)
        view["kinds_text"] = gr.Markdown()
        # any file type: the handler says what is wrong with one that is not a trace
        upload = gr.File(label=FIELD_LABELS["upload"] + " (no models needed)", height=110)
        upload_message = gr.Markdown()
    outputs, show = _view_outputs(RunView, view, form, alert, sidebar, upload_message, loader, about)
    run_b.click(_streaming(show, partial(h.run, loader)), [session, *form.values()], outputs,
                show_progress="hidden").then(None, None, None, js=SHOW_FIELD_ERROR)
    stop_b.click(h.stop, session, view["status"])
    step_replayed(upload.upload(lambda s, path: show(h.replay(s, path)), [session, upload], outputs), upload)
    return [run_b]


def _compare_tab(loader, session, form, sidebar) -> list:
    with gr.Tab("Compare", id=start.COMPARE):
        about = gr.State(None)
        with gr.Row():  # at 400 px the buttons share a line under the field, each wide enough for its label
            runs = gr.Number(1, label=FIELD_LABELS["runs"], info=HINTS["runs"], min_width=200)
            compare_b = gr.Button("Run both", variant="primary", min_width=130)
            stop_b = gr.Button("Stop comparison", variant="stop", min_width=130)
        alert = gr.Markdown(elem_classes=["spec-alert"])
        view = {"verdict": gr.HTML(),
                "badge": gr.Markdown("Runs verifier-only and speculative decoding on the same settings, round for "
                                     "round in turn (with the tree drafter: verifier only, a chain and the tree).")}
        with gr.Row():
            with gr.Column(min_width=COLUMN_MIN_WIDTH):
                gr.Markdown("### Verifier only")
                view["base_stats"] = gr.Markdown()
            with gr.Column(min_width=COLUMN_MIN_WIDTH):
                view["spec_title"] = gr.Markdown("### Speculative")
                view["spec_stats"] = gr.Markdown()
            with gr.Column(min_width=COLUMN_MIN_WIDTH, visible=False) as view["tree_side"]:
                gr.Markdown("### Tree (draft model)")
                view["tree_stats"] = gr.Markdown()
        view["aligned"] = gr.HTML(elem_id="aligned-outputs")
        with gr.Accordion("Each output as plain text, to copy", open=False):
            view["base_text"] = gr.HTML(elem_id="verifier-only-text")
            view["spec_text"] = gr.HTML(elem_id="speculative-text")
            view["tree_text"] = gr.HTML(elem_id="tree-text")
        view["live"] = gr.HTML()
        view["race"] = gr.Plot(visible=False, show_label=False)
        with gr.Row():
            view["why"] = gr.Markdown()
            view["why_chart"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["kinds"] = gr.Plot(visible=False, show_label=False)
        view["kinds_text"] = gr.Markdown()
    fields_ = {**form, "runs": runs}
    outputs, show = _view_outputs(CompareView, view, fields_, alert, sidebar, loader=loader, about=about)

    def listener(session_, *values):
        *form_values, n = values
        for i, result in enumerate(h.compare(loader, session_, dict(zip(FORM, form_values)), n)):
            yield show(result, first=i == 0)
    compare_b.click(listener, [session, *form.values(), runs], outputs).then(None, None, None, js=SHOW_FIELD_ERROR)
    runs.change(partial(_checked, loader, "runs"), runs, runs, **AS_EDITED)
    stop_b.click(h.stop, session, view["badge"])
    return [compare_b]


def _view_outputs(record, components: dict, form: dict, alert, sidebar, upload_message=None, loader=None, about=None):
    """The components of a view record in field order, then the form fields (whose hint lines carry
    messages), the alert, the field it is about, the sidebar and the upload message; and the
    function that turns a handler's result into their values. An alert about a field follows it as
    it is edited: gone once the field holds a value a run takes (checked with ``loader``'s models)."""
    names = [f.name for f in fields(record)]
    assert set(components) == set(names), f"{record.__name__}: components {sorted(components)} != fields {names}"
    extra = [c for c in (alert, about, sidebar, upload_message) if c is not None]
    outputs = [components[n] for n in names] + list(form.values()) + extra
    skip = [gr.skip()] * len(names)

    def hints(bad: str | None = None, message: str = "") -> list:
        """Every field's hint (a run went through), or the message at the bad field alone: the
        message of another mistake stays until that field is fixed."""
        if bad is None:
            return [_hint(name) for name in form]
        return [_hint(name, message) if name == bad else gr.skip() for name in form]

    def tail(alert_text=None, field=None, open_sidebar=False, upload_text=None) -> list:
        out = []
        if alert is not None:
            out.append(gr.skip() if alert_text is None else alert_text)
        if about is not None:
            out.append(gr.skip() if alert_text is None else field)
        if sidebar is not None:
            out.append(gr.Sidebar(open=True) if open_sidebar else gr.skip())
        if upload_message is not None:
            out.append(gr.skip() if upload_text is None else upload_text)
        return out

    for name, component in form.items():
        component.change(partial(_follow, loader, name), [component, about], [alert, about], **AS_EDITED)

    def values_of(result) -> list:
        values = []
        for name in names:
            value, component = getattr(result, name), components[name]
            if isinstance(value, str) and value == UNCHANGED:
                value = gr.skip()
            elif isinstance(component, gr.Plot):  # no empty boxes before there is data
                value = gr.update(value=value, visible=value is not None)
            elif isinstance(component, gr.Column):  # a column shown or not
                value = gr.update(visible=value)
            elif name in TREE_ONLY:  # no empty box beside a chain round
                value = gr.update(value=value, visible=value != "")
            elif name == "download":
                value = gr.update(value=value, interactive=value is not None)
            values.append(value)
        return values

    def show(result, first: bool = True):
        """``first``: the first result of an event, which clears the messages of an earlier one;
        the later ones of a stream leave the form alone (re-rendering it costs the browser)."""
        if result is None:
            return [gr.skip()] * len(outputs)
        if isinstance(result, Problem):
            if result.field == "upload" and upload_message is not None:
                return skip + [gr.skip()] * len(form) + tail(upload_text=f"**Could not replay:** {result.message}")
            if result.field in form:
                return skip + hints(result.field, result.message) + tail(
                    _alert(result.field, result.message), result.field, open_sidebar=result.field in FORM)
            return skip + [gr.skip()] * len(form) + tail(f"⚠ {result.message}")
        if isinstance(result, Replayed):
            restored = [gr.update(value=result.form[name], info=HINTS.get(name) or "", elem_classes=[])
                        if name in result.form else gr.skip() for name in form]
            return values_of(result.view) + restored + tail("", upload_text="")
        if not first:
            return values_of(result) + [gr.skip()] * len(form) + tail()
        return values_of(result) + hints() + tail("", upload_text="")
    return outputs, show


def _streaming(show, handler):
    def listener(session, *values):
        for i, result in enumerate(handler(session, dict(zip(FORM, values)))):
            yield show(result, first=i == 0)
    return listener


def _info(loader: Loader) -> str:
    from specdec.teach.exactness import how_exact
    p = loader.pair
    if p is None:
        return "Models: " + (f"failed to load: {loader.error}" if loader.error else "loading...")
    dp = p.draft_precision
    out = (f"**Device** {p.device.type} · **verifier** {p.target_name} on **{p.precision.label}** · "
           + (f"**draft** {p.draft_name} on **{(dp or p.precision).label}**" if p.draft is not None else "no draft model"))
    counts = [f"{role} {_parameters(p.parameter_breakdown(model))}"
              for role, model in (("verifier", p.target), ("draft", p.draft)) if model is not None]
    return (out + "  \nParameters: " + "; ".join(counts) + ". (A published size such as 1.5B counts a shared "
            "embedding/output table once; these weights store the two separately.)"
            f"  \n*Why {p.precision.label} for the verifier:* {p.precision.reason.split(': ', 1)[-1]}"
            + (f"  \n*Why {dp.label} for the draft:* {dp.reason.split(': ', 1)[-1]}" if p.draft is not None and dp
               else "")
            + f"  \n*Greedy output equals verifier-only:* {how_exact(p)}.")


def _parameters(b: dict) -> str:
    parts = f"embedding {_count(b['embedding'])}" + ("" if b["tied"] else f", output layer {_count(b['output'])}")
    return f"{_count(b['total'])} ({parts})"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def _progress_html(loader: Loader) -> str:
    if loader.error:
        return f'<p role="alert">Loading failed: {escape(loader.error)}</p>'
    p = loader.pair
    if p is not None:
        loaded = f", loaded in {loader.seconds:.0f} s" if loader.seconds >= 1 else ""
        return (f'<p class="spec-ready">Ready: {escape(p.target_name.removeprefix("embedded:"))} verifier'
                + (f', {escape(p.draft_name.removeprefix("embedded:"))} draft' if p.draft is not None else "")
                + f" on {p.device.type}, {escape(p.precision.label)}"
                + (f" / {escape(p.draft_precision.label)}" if p.draft is not None and p.draft_precision else "")
                + f"{loaded}.</p>")
    return (f'<label>Loading models: {escape(loader.message)} <progress aria-label="model loading" max="1" '
            f'value="{loader.fraction:.2f}" style="width: 100%"></progress></label>')


def _poll_loading(demo, loader: Loader, header: tuple, needs_models: list) -> None:
    info, progress, timer, model_buttons = header

    def poll():
        return [_progress_html(loader), _info(loader), gr.Timer(active=loader.loading),
                *[gr.Button(interactive=loader.pair is not None) for _ in needs_models],
                *[gr.Button(interactive=not loader.loading) for _ in model_buttons]]

    outputs = [progress, info, timer, *needs_models, *model_buttons]
    # one poll at a time, answered in order: a late answer from before the models were ready must
    # not disable the buttons again
    once = dict(show_progress="hidden", concurrency_limit=1, concurrency_id="loading-poll", trigger_mode="once")
    timer.tick(poll, None, outputs, **once)
    demo.load(poll, None, outputs, **once)


# Gradio's queue polls for work every 1 ms and for progress every 10 ms. Each wake-up takes the GIL
# from the engine's thread and a slice of a core from its matmuls: on 2 cores that cost a run
# several percent of its speed (benchmarks/app_overhead.py). 20 ms and 100 ms are still instant to a person.
QUEUE_POLL_S, PROGRESS_POLL_S = 0.02, 0.1


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int = 7860, share: bool = False, **kwargs):
    demo.queue(default_concurrency_limit=8)
    demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free = QUEUE_POLL_S, PROGRESS_POLL_S
    return demo.launch(server_name=host, server_port=port, share=share, css=CSS, theme=THEME,
                       allowed_paths=[str(notebooks.PAGES)], **kwargs)  # the notebooks' pages, for their links

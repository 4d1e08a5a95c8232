"""The page: a header (the models, the notebooks, the legend and the text switches), the settings in a
sidebar, Start here, and the tabs, one module each in :mod:`specdec_ui.tabs`.

The tabs are named in :data:`TABS`, in the order of the lesson; each module has ``build(page, tab_id)``
(:class:`~specdec_ui.wiring.Page`), so a new tab is a module in ``specdec_ui/tabs/`` and its name in
:data:`TABS`. The CSS is ``style.css``, after the custom properties this module writes from the one
style (:mod:`specdec.teach.style`).
"""
from __future__ import annotations

from functools import partial
from html import escape
from importlib import import_module
from pathlib import Path
from typing import Iterator

import gradio as gr

from specdec import ModelChoice
from specdec.teach.style import BAR, FILL, INK, LINE, MARKS, MUTED, PHASE_COLORS
from specdec_ui import charts, notebooks, start
from specdec_ui.markup import legend_html
from specdec_ui.state import (
    FIELD_LABELS,
    FIELDS,
    FORM,
    HINTS,
    MODEL_CHOICES,
    MODEL_FIELDS,
    MODEL_FORM,
    Loader,
    Session,
    form_defaults,
    model_field,
    model_values,
    parse_models,
)
from specdec_ui.views import Problem, field_message
from specdec_ui.wiring import AS_EDITED, Page, checked, hint

# The tabs in the order of the lesson, each the module of that name in specdec_ui/tabs (its id on the page too).
TABS = ("rule", "step", "run", "compare", "race")
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
    "06_token_trees": "token trees: the draft's second guess, the rule for siblings and its proof, trees drafted on the fly",
    "07_tree_attention_and_shape": "the tree attention mask, what a tree forward costs here, the best tree shape for this machine",
    "08_drafters_race": "every family of drafts raced on one verifier: draft model, prompt lookup, suffix tree, self-drafting",
}
# The one style as CSS custom properties, read by style.css with var(--spec-...).
MARK_NAMES = {" ": "space", "\t": "tab", "\n": "newline"}
PROPERTIES = {"ink": INK, "muted": MUTED, **{f"fill-{k}": v for k, v in FILL.items()},
              **{f"line-{k}": v for k, v in LINE.items()}, **{f"bar-{k}": v for k, v in BAR.items()},
              **{f"phase-{k}": v for k, v in PHASE_COLORS.items()},
              **{f"mark-{MARK_NAMES[c]}": f'"{mark}"' for c, mark in MARKS.items()},
              "live-height": f"{charts.LIVE_HEIGHT}px"}
CSS = (":root {\n" + "".join(f"  --spec-{name}: {value};\n" for name, value in PROPERTIES.items()) + "}\n"
       + (Path(__file__).parent / "style.css").read_text(encoding="utf-8"))
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
# On a phone-sized window the open sidebar would cover the page: start it closed there.
CLOSE_SIDEBAR_WHEN_NARROW = """() => setTimeout(() => {
  if (window.innerWidth < 900) document.querySelector('.sidebar.open .toggle-button')?.click();
}, 300)"""
SKIP_TARGET = "start-here-top"
# The page-wide switches toggle a class on the page, so no text is sent again.
REJECTED_DRAFTS = "(how) => { document.body.classList.toggle('rejected-inline', how === 'inline'); }"
SHOW_WHITESPACE = "(show) => { document.body.classList.toggle('show-whitespace', show); }"


def build_demo(loader: Loader) -> gr.Blocks:
    """The page on ``loader``'s models, shared by every browser session (each has its own Session)."""
    charts.warm_up()
    with gr.Blocks(title="Speculative decoding") as demo:
        gr.HTML(f'<a class="skip-link" href="#{SKIP_TARGET}">Skip to Start here</a>')
        gr.Markdown(INTRO)
        session = gr.State(lambda: Session())  # a callable: a fresh Session per browser session
        with gr.Sidebar(open=True, label="Settings") as sidebar:
            form = _settings(loader)
        # The skip link's target takes the focus (tabindex -1), so the next Tab is Start here's header: with the
        # accordion itself as the target, Chromium on a busy machine left the next Tab at the top of the page.
        gr.HTML(f'<span id="{SKIP_TARGET}" tabindex="-1"></span>', padding=False, elem_classes=["skip-target"])
        path = start.build(EXAMPLES[0][0])
        header = _header(loader)
        page = Page(loader, session, form, sidebar)
        with gr.Tabs():
            for name in TABS:
                import_module(f"specdec_ui.tabs.{name}").build(page, name)
        page.wire_uploads()
        start.wire(demo, *path, form, page.all_k)
        _poll_loading(demo, loader, header, page.needs_models)
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
        whitespace = gr.Checkbox(False, label=f"show whitespace as {' '.join(MARKS.values())}", container=False)
    rejected.change(None, rejected, None, js=REJECTED_DRAFTS)
    whitespace.change(None, whitespace, None, js=SHOW_WHITESPACE)
    return info, progress, timer, model_buttons


# ---- the model pair ---------------------------------------------------------------------------

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
        for result in load_models(loader, dict(zip(MODEL_FORM, values))):
            yield show(result)
    load_b.click(load, list(fields.values()), outputs, concurrency_limit=1, concurrency_id="load-models")
    embedded = list(model_values(ModelChoice()).values())
    embedded_b.click(lambda: embedded, None, list(fields.values()), queue=False).then(
        load, list(fields.values()), outputs, concurrency_limit=1, concurrency_id="load-models")
    # a page opened after a switch shows the choice in use, not the one the app started with
    gr.on(None, lambda: list(model_values(loader.models).values()), None, list(fields.values()))
    for name, component in fields.items():  # a fixed value loses its red message at once
        component.input(partial(hint, name), None, component, show_progress="hidden", queue=False)
    return [load_b, embedded_b]


SAME_MODELS = "These are the models in use: change a field first, or press Run or a step button to use them."
ALREADY_LOADING = "A pair is loading already (pressed in another session?): wait for it, then try again."
SETTLED_POLL_S = 0.25


def load_models(loader: Loader, values: dict) -> Iterator[str | Problem]:
    """Switch every session to the header's model pair (the command line's --target, --draft, ...).
    A status line once it loads, then "" once it is in use; or a Problem at the field whose value
    the loader refused, with the loader's own message, as soon as it is refused (the pair in use
    before then loads again)."""
    models = parse_models(values)
    if loader.pair is not None and models == loader.models:
        yield Problem(SAME_MODELS)
        return
    if not loader.switch(models):
        yield Problem(ALREADY_LOADING)
        return
    if loader.refused is None:
        yield (f"Loading {models.target}" + (f" with {models.draft}" if models.draft else ", no draft model")
               + "; every session's step-through will restart on it.")
    while loader.loading and loader.refused is None:
        loader.wait(SETTLED_POLL_S)
    if loader.refused is None:
        yield ""
        return
    field = model_field(loader.refused)
    yield Problem(field_message(Problem(str(loader.refused), field), FIELD_LABELS, values.get(field)), field)



# ---- the notebooks, the sidebar, the models as they load -------------------------------------

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
        component.change(partial(checked, loader, name), component, component, **AS_EDITED)
    return form


def _field(o, value, visible: bool):
    """The input an option's type asks for: a radio for choices, a text box for text, else a number
    box (integer fields take any number and refuse 2.5 themselves: no silent rounding)."""
    if o.app_choices:
        return gr.Radio([(words, v) for v, words in o.app_choices.items()], value=value, label=o.label,
                        visible=visible)
    if o.type is str:
        return gr.Textbox(value, label=o.label, lines=4, visible=visible)
    if o.type is bool:
        return gr.Checkbox(value, label=o.label, info=HINTS[o.name], visible=visible)
    assert o.type in (int, float), f"{o.name}: the form has no input for {o.type}"
    return gr.Number(value, label=o.label, info=HINTS[o.name], visible=visible)


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
                + f"{loaded}."
                + (" Now timing this machine's forward costs (once per machine, about half a minute; the Verify "
                   "text and Adaptive K read them): a round pressed meanwhile waits for it."
                   if loader.timing else "") + "</p>")
    return (f'<label>Loading models: {escape(loader.message)} <progress aria-label="model loading" max="1" '
            f'value="{loader.fraction:.2f}" style="width: 100%"></progress></label>')


def _poll_loading(demo, loader: Loader, header: tuple, needs_models: list) -> None:
    info, progress, timer, model_buttons = header

    def poll():
        return [_progress_html(loader), _info(loader), gr.Timer(active=loader.loading or loader.timing),
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


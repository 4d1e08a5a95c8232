"""The page: a header, the settings in a sidebar, and one function per tab.

Each tab builds one component per field of its view record (:mod:`.views`) and shows a record by
those fields. A :class:`~.views.Problem` changes nothing the page shows but the message at the
field it concerns (the field's hint line turns into the message) and a toast.
"""
from __future__ import annotations

from dataclasses import fields
from functools import partial
from html import escape

import gradio as gr

from . import handlers as h
from .charts import COLORS
from .state import FORM, FIELD_LABELS, Loader, Session, form_defaults
from .views import CompareView, Problem, RunView, StepView, legend_html, plain_html

EXAMPLES = [
    ["Write a Python function that returns the n-th Fibonacci number iteratively.", "model"],
    ["Write a Python function that checks whether a number is prime.", "model"],
    ["Write a SQL query that returns the ten customers with the highest total order value.", "model"],
    ["Rename the variable `x` to `total` in this function and return the full code:\n\n"
     "def add_all(items):\n    x = 0\n    for item in items:\n        x = x + item\n    return x\n", "lookup"],
    ["In three sentences, explain why the sky is blue.", "model"],
]
INTRO = ("**Speculative decoding, step by step.** A small *draft* model proposes K tokens; the *verifier* checks "
         "them in one forward pass and keeps a leading run, so the output is distributed exactly as the verifier's "
         "own (Leviathan et al. 2023). **p** = verifier, **q** = draft. Settings: the sidebar.")
HINTS = {"prompt": None, "drafter": None, "k": "most tokens the draft proposes per round, 1 to 32",
         "confidence": "a draft stops early after a token it gives less than this",
         "temperature": "0 = greedy; try 0.8 to see the rule at work", "top_k": "0 = off", "top_p": "1 = off",
         "seed": "same seed, same run", "max_new_tokens": "tokens to generate"}
# Every kind of token has a colour and a second cue: rejected drafts are struck through (<del>),
# resampled tokens have a dashed underline, bonus tokens a double one, accepted drafts a solid one,
# verifier-only tokens none. Whitespace markers are CSS content: seen, never copied.
CSS = f"""
.spec-tokens, .spec-plain {{ line-height: 1.9; white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas,
  monospace; font-size: 14px; margin: 0; color: #111827; }}
.spec-plain {{ background: #f9fafb; padding: 8px; border-radius: 6px; max-height: 360px; overflow: auto; }}
.spec-empty {{ color: #4b5563; font-style: italic; }}
.tok {{ color: #111827; border-radius: 3px; padding: 1px 0; text-decoration-thickness: 2px; }}
.tok:focus {{ outline: 3px solid #1d4ed8; outline-offset: 1px; }}
.tok-accepted {{ background: {COLORS['accepted']}; border-bottom: 2px solid #15803d; }}
.tok-rejected {{ background: {COLORS['rejected']}; text-decoration: line-through; }}
.tok-resampled {{ background: {COLORS['resampled']}; border-bottom: 2px dashed #92400e; }}
.tok-bonus {{ background: {COLORS['bonus']}; border-bottom: 4px double #1e40af; }}
.tok-plain {{ background: {COLORS['plain']}; }}
.sp, .tab, .nl {{ position: relative; }}
.sp::before {{ content: "·"; position: absolute; left: 0; right: 0; text-align: center; color: #6b7280; }}
.tab::before {{ content: "→"; position: absolute; left: 0; color: #6b7280; }}
.nl::before {{ content: "↵"; color: #6b7280; }}
.spec-legend, .spec-ready {{ font-size: 13px; margin: 0; }}
.spec-legend .tok {{ margin-right: 6px; padding: 1px 4px; }}
.field-error textarea, .field-error input {{ border-color: #b91c1c !important; }}
.field-error .info, .field-error span[data-testid="block-info"] + div {{ color: #b91c1c !important; }}
"""
THEME = gr.themes.Default(primary_hue="blue").set(
    # white text on these fills is at least 4.5:1 (WCAG AA): #1d4ed8 6.7:1, #b91c1c 6.5:1
    button_primary_background_fill="#1d4ed8", button_primary_background_fill_hover="#1e40af",
    button_primary_text_color="#ffffff", button_cancel_background_fill="#b91c1c",
    button_cancel_background_fill_hover="#991b1b", button_cancel_text_color="#ffffff")
PLOT_MIN_WIDTH = 450
# On a phone-sized window the open sidebar would cover the page: start it closed there.
CLOSE_SIDEBAR_WHEN_NARROW = """() => setTimeout(() => {
  if (window.innerWidth < 900) document.querySelector('.sidebar.open .toggle-button')?.click();
}, 300)"""  # two plots share a row from ~900 px of content width; below it, one plot per row


def build_demo(loader: Loader) -> gr.Blocks:
    with gr.Blocks(title="Speculative decoding") as demo:
        session = gr.State(lambda: Session())  # a callable: a fresh Session per browser session
        with gr.Sidebar(open=True, label="Settings"):
            form = _settings()
        header = _header(loader)
        needs_models = []
        with gr.Tabs():
            needs_models += _step_tab(loader, session, form)
            needs_models += _run_tab(loader, session, form)
            needs_models += _compare_tab(loader, session, form)
        _poll_loading(demo, loader, header, needs_models)
        demo.load(None, None, None, js=CLOSE_SIDEBAR_WHEN_NARROW)
    return demo


def _header(loader: Loader) -> tuple:
    gr.Markdown(INTRO)
    progress = gr.HTML(_progress_html(loader))
    with gr.Accordion("Models, precision and parameter counts", open=False):
        info = gr.Markdown(_info(loader))
    gr.HTML(legend_html())
    return info, progress, gr.Timer(0.5)


def _settings() -> dict:
    d = form_defaults()
    form = {"prompt": gr.Textbox(label=FIELD_LABELS["prompt"], lines=4, value=EXAMPLES[0][0]),
            "drafter": gr.Radio([("draft model", "model"), ("prompt lookup", "lookup")], value=d["drafter"],
                                label=FIELD_LABELS["drafter"])}
    for name in FORM[2:]:  # integer fields take any number and refuse 2.5 themselves (no silent rounding)
        form[name] = gr.Number(d[name], label=FIELD_LABELS[name], info=HINTS[name])
    gr.Examples(EXAMPLES, [form["prompt"], form["drafter"]], label="Example prompts")
    assert tuple(form) == FORM
    return form


def _step_tab(loader, session, form) -> list:
    with gr.Tab("Step through"):
        with gr.Row():
            buttons = {a: gr.Button(label, min_width=90) for a, label in (("draft", "Draft"), ("verify", "Verify"),
                                                                          ("next", "Next round"))}
            buttons["step"] = gr.Button("Step round", variant="primary", min_width=90)
            buttons["reset"] = gr.Button("Reset", min_width=90)
        view = {"status": gr.Markdown("Press **Draft** to propose K tokens, or **Step round** for a whole round."),
                "banner": gr.Markdown(), "explain": gr.Markdown()}
        with gr.Row():
            view["dist"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["ratio"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        view["table"] = gr.Dataframe(label="Drafted tokens", interactive=False, visible=False, wrap=True)
        view["cache"] = gr.Markdown()
        view["text"], view["plain"] = _text_views("step")
    outputs, show = _view_outputs(StepView, view, form)
    for action, button in buttons.items():
        button.click(_streaming(show, partial(h.step, loader, action)), [session, *form.values()], outputs)
    return list(buttons.values())


def _text_views(prefix: str) -> tuple:
    gr.Markdown("**Text by origin** — hover over or tab to a token for its numbers")
    text = gr.HTML('<div class="spec-tokens spec-empty">No tokens yet.</div>')
    with gr.Accordion("Plain text (whitespace shown as · ↵ →; Copy copies the text itself)", open=False):
        plain = gr.HTML(plain_html(""), elem_id=f"{prefix}-plain")
        copy = gr.Button("Copy text", size="sm")
    copy.click(None, None, None, js=f"() => navigator.clipboard.writeText("
                                    f"document.querySelector('#{prefix}-plain pre').innerText)")
    return text, plain


def _run_tab(loader, session, form) -> list:
    with gr.Tab("Run"):
        with gr.Row():
            run_b = gr.Button("Run", variant="primary", min_width=90)
            stop_b = gr.Button("Stop run", variant="stop", min_width=90)
            download = gr.DownloadButton("Download trace (JSON)", interactive=False, min_width=90)
        view = {"status": gr.Markdown("Press **Run** to generate, round by round."), "download": download}
        view["text"], view["plain"] = _text_views("run")
        view["stats"] = gr.Markdown()
        with gr.Row():
            view["timing"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["ratio"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        with gr.Row():
            view["acceptance"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
            view["tokens"] = gr.Plot(visible=False, show_label=False, min_width=PLOT_MIN_WIDTH)
        upload = gr.File(label=FIELD_LABELS["upload"] + " (no models needed)", file_types=[".json"], height=110)
        upload_message = gr.Markdown()
    outputs, show = _view_outputs(RunView, view, form, upload_message)
    run_b.click(_streaming(show, partial(h.run, loader)), [session, *form.values()], outputs)
    stop_b.click(h.stop, session, view["status"])
    upload.upload(lambda s, path: show(h.replay(s, path)), [session, upload], outputs)
    return [run_b]


def _compare_tab(loader, session, form) -> list:
    with gr.Tab("Compare"):
        with gr.Row():
            compare_b = gr.Button("Run both", variant="primary", min_width=90)
            stop_b = gr.Button("Stop comparison", variant="stop", min_width=90)
        view = {"badge": gr.Markdown("Runs verifier-only and speculative decoding on the same settings.")}
        with gr.Row():
            with gr.Column(min_width=300):
                gr.Markdown("### Verifier only")
                view["base_stats"] = gr.Markdown()
                view["base_text"] = gr.HTML(plain_html(""), elem_id="verifier-only-text")
            with gr.Column(min_width=300):
                gr.Markdown("### Speculative")
                view["spec_stats"] = gr.Markdown()
                view["spec_text"] = gr.HTML(plain_html(""), elem_id="speculative-text")
        view["race"] = gr.Plot(visible=False, show_label=False)
    outputs, show = _view_outputs(CompareView, view, form)
    compare_b.click(_streaming(show, partial(h.compare, loader)), [session, *form.values()], outputs)
    stop_b.click(h.stop, session, view["badge"])
    return [compare_b]


def _view_outputs(record, components: dict, form: dict, upload_message=None):
    """The components of a view record in field order, then the form fields (whose hint lines carry
    messages) and the upload message; and the function that turns a handler's result into values."""
    names = [f.name for f in fields(record)]
    assert set(components) == set(names), f"{record.__name__}: components {sorted(components)} != fields {names}"
    extra = [upload_message] if upload_message is not None else []
    outputs = [components[n] for n in names] + list(form.values()) + extra

    def hints(bad: str | None = None, message: str = "") -> list:
        return [gr.update(info=message if name == bad else HINTS[name],
                          elem_classes=["field-error"] if name == bad else []) for name in form]

    def show(result):
        if result is None:
            return [gr.skip()] * len(outputs)
        if isinstance(result, Problem):
            gr.Warning(result.message)
            if result.field == "upload" and extra:
                return [gr.skip()] * (len(names) + len(form)) + [f"**Could not replay:** {result.message}"]
            if result.field in form:
                return [gr.skip()] * len(names) + hints(result.field, result.message) + [gr.skip()] * len(extra)
            return [gr.skip()] * (len(names) + len(form)) + [gr.skip()] * len(extra)
        values = []
        for name in names:
            value, component = getattr(result, name), components[name]
            if isinstance(component, (gr.Plot, gr.Dataframe)):  # no empty boxes before there is data
                value = gr.update(value=value, visible=value is not None)
            elif name == "download":
                value = gr.update(value=value, interactive=value is not None)
            values.append(value)
        return values + hints() + [""] * len(extra)
    return outputs, show


def _streaming(show, handler):
    def listener(session, *values):
        for result in handler(session, dict(zip(FORM, values))):
            yield show(result)
    return listener


def _info(loader: Loader) -> str:
    p = loader.pair
    if p is None:
        return "Models: " + (f"failed to load: {loader.error}" if loader.error else "loading...")
    out = f"**Device** {p.device.type} · **precision** {p.precision.name} · **verifier** {p.target_name} · " + (
        f"**draft** {p.draft_name}" if p.draft is not None else "no draft model")
    counts = [f"{role} {_parameters(p.parameter_breakdown(model))}"
              for role, model in (("verifier", p.target), ("draft", p.draft)) if model is not None]
    return (out + "  \nParameters: " + "; ".join(counts) + ". (A published size such as 1.5B counts a shared "
            "embedding/output table once; these weights store the two separately.)"
            f"  \n*Why {p.precision.name}:* {p.precision.reason.split(': ', 1)[-1]}")


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
                + f" on {p.device.type}, {p.precision.name}{loaded}.</p>")
    return (f'<label>Loading models: {escape(loader.message)} <progress aria-label="model loading" max="1" '
            f'value="{loader.fraction:.2f}" style="width: 100%"></progress></label>')


def _poll_loading(demo, loader: Loader, header: tuple, needs_models: list) -> None:
    info, progress, timer = header

    def poll():
        done = loader.pair is not None or loader.error is not None
        return [_progress_html(loader), _info(loader), gr.Timer(active=not done),
                *[gr.Button(interactive=loader.pair is not None) for _ in needs_models]]

    outputs = [progress, info, timer, *needs_models]
    timer.tick(poll, None, outputs, show_progress="hidden")
    demo.load(poll, None, outputs, show_progress="hidden")


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int = 7860, share: bool = False, **kwargs):
    return demo.queue(default_concurrency_limit=8).launch(server_name=host, server_port=port, share=share,
                                                           css=CSS, theme=THEME, **kwargs)

"""The page: a header, the settings column, and one function per tab.

Each tab builds one component per field of its view record (:mod:`.views`) and shows a record by
those fields; a :class:`~.views.Problem` leaves every component as it is and only sets the message.
"""
from __future__ import annotations

from dataclasses import fields
from functools import partial
from html import escape

import gradio as gr

from specdec.render import ROW_HEADERS

from . import handlers as h
from .charts import COLORS
from .state import FORM, Loader, Session, form_defaults
from .views import CompareView, Problem, RunView, StepView, legend_html

EXAMPLES = [
    ["Write a Python function that returns the n-th Fibonacci number iteratively.", "model"],
    ["Write a Python function that checks whether a number is prime.", "model"],
    ["Write a SQL query that returns the ten customers with the highest total order value.", "model"],
    ["Rename the variable `x` to `total` in this function and return the full code:\n\n"
     "def add_all(items):\n    x = 0\n    for item in items:\n        x = x + item\n    return x\n", "lookup"],
    ["In three sentences, explain why the sky is blue.", "model"],
]
INTRO = """# Speculative decoding, step by step
A small **draft** model proposes K tokens; the large **verifier** checks them all in one forward pass and keeps a
leading run, so the output is distributed exactly as if the verifier had written it alone (Leviathan et al. 2023).
Letters as in the paper: **p** is the verifier's distribution, **q** the draft's."""
# Every kind of token has a colour and a second cue: rejected drafts are struck through (<del>),
# resampled tokens have a dashed underline, bonus tokens a double one, accepted drafts a solid one.
CSS = f"""
.spec-tokens {{ line-height: 1.9; white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 14px; }}
.tok {{ color: #111827; border-radius: 3px; padding: 1px 0; text-decoration-thickness: 2px; }}
.tok:focus {{ outline: 2px solid #1d4ed8; }}
.tok-accepted {{ background: {COLORS['accepted']}; border-bottom: 2px solid #15803d; }}
.tok-rejected {{ background: {COLORS['rejected']}; text-decoration: line-through; }}
.tok-resampled {{ background: {COLORS['resampled']}; border-bottom: 2px dashed #92400e; }}
.tok-bonus {{ background: {COLORS['bonus']}; border-bottom: 4px double #1e40af; }}
.tok-plain {{ background: {COLORS['plain']}; }}
.spec-legend .tok {{ margin-right: 8px; padding: 1px 4px; font-size: 13px; }}
"""


def build_demo(loader: Loader) -> gr.Blocks:
    with gr.Blocks(title="Speculative decoding") as demo:
        session = gr.State(lambda: Session())  # a callable: a fresh Session per browser session
        gr.Markdown(INTRO)
        needs_models = []
        header = _header(loader)
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                form, message = _settings_column()
            with gr.Column(scale=3):
                gr.HTML(legend_html())
                with gr.Tabs():
                    needs_models += _step_tab(loader, session, form, message)
                    needs_models += _run_tab(loader, session, form, message)
                    needs_models += _compare_tab(loader, session, form, message)
        _poll_loading(demo, loader, header, needs_models)
    return demo


def _header(loader: Loader) -> tuple:
    info = gr.Markdown(_info(loader))
    progress = gr.HTML(_progress_html(loader))
    return info, progress, gr.Timer(0.5)


def _settings_column() -> tuple[dict, gr.Markdown]:
    d = form_defaults()
    form = {"prompt": gr.Textbox(label="Prompt", lines=4, value=EXAMPLES[0][0]),
            "drafter": gr.Radio([("draft model", "model"), ("prompt lookup", "lookup")], value=d["drafter"],
                                label="Drafter")}
    with gr.Row():
        form["k"] = gr.Number(d["k"], label="K (drafted tokens per round)", precision=0)
        form["confidence"] = gr.Number(d["confidence"], label="Draft confidence (0 = always K)",
                                       info="a draft stops early after a token it gives less than this")
        form["temperature"] = gr.Number(d["temperature"], label="Temperature (0 = greedy)")
    with gr.Row():
        form["top_k"] = gr.Number(d["top_k"], label="Top-k (0 = off)", precision=0)
        form["top_p"] = gr.Number(d["top_p"], label="Top-p")
    with gr.Row():
        form["seed"] = gr.Number(d["seed"], label="Seed", precision=0)
        form["max_new_tokens"] = gr.Number(d["max_new_tokens"], label="Max new tokens", precision=0)
    message = gr.Markdown()
    gr.Examples(EXAMPLES, [form["prompt"], form["drafter"]], label="Example prompts")
    assert tuple(form) == FORM
    return form, message


def _step_tab(loader, session, form, message) -> list:
    with gr.Tab("Step through a round"):
        with gr.Row():
            buttons = {a: gr.Button(label) for a, label in (("draft", "Draft"), ("verify", "Verify"),
                                                             ("next", "Next round"))}
            buttons["step"] = gr.Button("Step round", variant="primary")
            buttons["reset"] = gr.Button("Reset")
        view = {"status": gr.Markdown("Press Draft to propose K tokens, or Step round."),
                "explain": gr.Markdown(),
                "table": gr.Dataframe(headers=ROW_HEADERS, label="Drafted tokens", interactive=False),
                "cache": gr.Markdown()}
        with gr.Row():
            view["ratio"] = gr.Plot(label="Acceptance test", show_label=False)
            view["dist"] = gr.Plot(label="Distributions at the last position", show_label=False)
        gr.Markdown("**Committed text** (hover or focus a token for its numbers)")
        view["text"] = gr.HTML()
    outputs, show = _view_outputs(StepView, view, message)
    for action, button in buttons.items():
        button.click(_listener(show, partial(h.step, loader, action)), [session, *form.values()], outputs)
    return list(buttons.values())


def _run_tab(loader, session, form, message) -> list:
    with gr.Tab("Run the whole generation"):
        with gr.Row():
            run_b, stop_b = gr.Button("Run", variant="primary"), gr.Button("Stop run", variant="stop")
            download = gr.DownloadButton("Download trace (JSON)", interactive=False)
        view = {"status": gr.Markdown(), "download": download}
        gr.Markdown("**Output by origin** (hover or focus a token for its numbers)")
        view["text"] = gr.HTML()
        view["stats"] = gr.Markdown()
        with gr.Row():
            view["ratio"] = gr.Plot(label="p/q and the draws u", show_label=False)
            view["timing"] = gr.Plot(label="Timing per phase", show_label=False)
        with gr.Row():
            view["acceptance"] = gr.Plot(label="Acceptance per round", show_label=False)
            view["tokens"] = gr.Plot(label="Tokens per round vs theory", show_label=False)
        upload = gr.File(label="Replay a downloaded trace (no models needed)", file_types=[".json"], height=110)
    outputs, show = _view_outputs(RunView, view, message)
    run_b.click(_streaming(show, partial(h.run, loader)), [session, *form.values()], outputs)
    stop_b.click(h.stop, session, view["status"])
    upload.upload(lambda s, path: show(h.replay(s, path)), [session, upload], outputs)
    return [run_b]


def _compare_tab(loader, session, form, message) -> list:
    with gr.Tab("Verifier only vs speculative"):
        with gr.Row():
            compare_b = gr.Button("Run both", variant="primary")
            stop_b = gr.Button("Stop comparison", variant="stop")
        view = {"badge": gr.Markdown()}
        with gr.Row():
            with gr.Column():
                view["base_stats"] = gr.Markdown()
                view["base_text"] = gr.Textbox(label="Verifier only", lines=8)
            with gr.Column():
                view["spec_stats"] = gr.Markdown()
                view["spec_text"] = gr.Textbox(label="Speculative", lines=8)
        view["race"] = gr.Plot(label="Tokens vs elapsed time", show_label=False)
    outputs, show = _view_outputs(CompareView, view, message)
    compare_b.click(_streaming(show, partial(h.compare, loader)), [session, *form.values()], outputs)
    stop_b.click(h.stop, session, view["badge"])
    return [compare_b]


def _view_outputs(record, components: dict, message):
    """The components of a view record in field order (plus the message), and the function that
    turns a handler's result into their values."""
    names = [f.name for f in fields(record)]
    assert set(components) == set(names), f"{record.__name__}: components {sorted(components)} != fields {names}"
    outputs = [components[n] for n in names] + [message]

    def show(result):
        if result is None:
            return [gr.skip()] * len(outputs)
        if isinstance(result, Problem):
            gr.Warning(result.message)
            return [gr.skip()] * len(names) + [f"**Error:** {result.message}"]
        values = [getattr(result, n) for n in names]
        if "download" in names:
            path = result.download
            values[names.index("download")] = gr.DownloadButton(value=path, interactive=path is not None)
        return values + [""]
    return outputs, show


def _listener(show, handler):
    def listener(session, *values):
        return show(handler(session, dict(zip(FORM, values))))
    return listener


def _streaming(show, handler):
    def listener(session, *values):
        for result in handler(session, dict(zip(FORM, values))):
            yield show(result)
    return listener


def _info(loader: Loader) -> str:
    p = loader.pair
    if p is None:
        return "Models: " + (f"failed to load: {loader.error}" if loader.error else "loading...")
    counts = p.param_counts()
    out = (f"**Device** {p.device.type} · **precision** {p.precision.name} · "
           f"**verifier** {p.target_name} ({_count(counts['target'])} parameters)")
    if p.draft is not None:
        out += f" · **draft** {p.draft_name} ({_count(counts['draft'])} parameters)"
    return out + f"  \n*Why {p.precision.name}:* {p.precision.reason.split(': ', 1)[-1]}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def _progress_html(loader: Loader) -> str:
    if loader.error:
        return f'<p role="alert">Loading failed: {escape(loader.error)}</p>'
    if loader.pair is not None:
        return f"<p>Models ready{f' (loaded in {loader.seconds:.1f} s)' if loader.seconds >= 0.1 else ''}.</p>"
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
                                                           css=CSS, **kwargs)

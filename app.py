"""The speculative decoding teaching app: layout and wiring only.

    python app.py [--host 127.0.0.1] [--port 7860] [--share] [--draft ...] [--target ...] [--device ...] [--precision ...]

The page is up at once; the models load in a background thread (once per process) while a progress
bar shows how far it got, and the controls that need them stay disabled until they are ready. The
handlers live in ``app_handlers`` (plain functions), the figures in ``app_charts``, the trace-to-display
rules in ``specdec.render``; the algorithm is the engine's.
"""
from __future__ import annotations

import argparse
from functools import partial
from html import escape

import gradio as gr

import app_handlers as h
from specdec import DEFAULT_DRAFT, DEFAULT_TARGET, GenerationConfig
from specdec.render import COLORS, ROW_HEADERS

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
# HighlightedText colours each span by label; a rejected draft is also struck through (it is not output).
CSS = """
.spec-text .token[style*="252, 165, 165"] .text { text-decoration: line-through; }
.spec-text .token .text { white-space: pre-wrap; }
"""


def _progress_html(loader: h.Loader) -> str:
    if loader.error:
        return f'<p role="alert">Loading failed: {escape(loader.error)}</p>'
    if loader.pair is not None:
        return f"<p>Models ready{f' (loaded in {loader.seconds:.1f} s)' if loader.seconds >= 0.1 else ''}.</p>"
    return (f'<label>Loading models: {escape(loader.message)} <progress aria-label="model loading" max="1" '
            f'value="{loader.fraction:.2f}" style="width: 100%"></progress></label>')


def build_demo(loader: h.Loader) -> gr.Blocks:
    ui: dict[str, gr.components.Component] = {}
    with gr.Blocks(title="Speculative decoding") as demo:
        session = gr.State(lambda: h.Session())  # a fresh Session per browser session
        gr.Markdown(INTRO)
        info = gr.Markdown(loader.info())
        progress = gr.HTML(_progress_html(loader))
        timer = gr.Timer(0.5)
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                prompt = gr.Textbox(label="Prompt", lines=4, value=EXAMPLES[0][0])
                drafter = gr.Radio([("draft model", "model"), ("prompt lookup", "lookup")], value="model",
                                   label="Drafter")
                with gr.Row():
                    k = gr.Number(GenerationConfig().k, label="K (drafted tokens per round)", precision=0)
                    confidence = gr.Number(GenerationConfig().confidence, label="Draft confidence (0 = always K)",
                                           info="a draft stops early after a token it gives less than this")
                    temperature = gr.Number(0.0, label="Temperature (0 = greedy)")
                with gr.Row():
                    top_k = gr.Number(0, label="Top-k (0 = off)", precision=0)
                    top_p = gr.Number(1.0, label="Top-p")
                with gr.Row():
                    seed = gr.Number(0, label="Seed", precision=0)
                    max_new = gr.Number(48, label="Max new tokens", precision=0)
                ui["message"] = gr.Markdown()
                gr.Examples(EXAMPLES, [prompt, drafter], label="Example prompts")
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Step through a round"):
                        with gr.Row():
                            draft_b, verify_b, next_b = gr.Button("Draft"), gr.Button("Verify"), gr.Button("Next round")
                            step_b, reset_b = gr.Button("Step round", variant="primary"), gr.Button("Reset")
                        ui["step_status"] = gr.Markdown("Press Draft to propose K tokens, or Step round.")
                        ui["step_explain"] = gr.Markdown()
                        ui["step_table"] = gr.Dataframe(headers=ROW_HEADERS, label="Drafted tokens", interactive=False)
                        ui["step_cache"] = gr.Markdown()
                        with gr.Row():
                            ui["step_ratio"] = gr.Plot(label="Acceptance test", show_label=False)
                            ui["step_dist"] = gr.Plot(label="Distributions at the last position", show_label=False)
                        ui["step_text"] = _highlighted("Committed text (select a token for its numbers)")
                        ui["step_detail"] = gr.Markdown()
                    with gr.Tab("Run the whole generation"):
                        with gr.Row():
                            run_b, stop_b = gr.Button("Run", variant="primary"), gr.Button("Stop run", variant="stop")
                            ui["download"] = gr.DownloadButton("Download trace (JSON)")
                        ui["run_status"] = gr.Markdown()
                        ui["run_text"] = _highlighted("Output by origin (select a token for its numbers)")
                        ui["run_detail"] = gr.Markdown()
                        ui["run_stats"] = gr.Markdown()
                        with gr.Row():
                            ui["run_ratio"] = gr.Plot(label="p/q and the draws u", show_label=False)
                            ui["run_timing"] = gr.Plot(label="Timing per phase", show_label=False)
                        with gr.Row():
                            ui["run_acceptance"] = gr.Plot(label="Acceptance per round", show_label=False)
                            ui["run_tokens"] = gr.Plot(label="Tokens per round vs theory", show_label=False)
                        upload = gr.File(label="Replay a downloaded trace (no models needed)", file_types=[".json"],
                                         height=110)
                    with gr.Tab("Verifier only vs speculative"):
                        with gr.Row():
                            compare_b = gr.Button("Run both", variant="primary")
                            stop_cmp_b = gr.Button("Stop comparison", variant="stop")
                        ui["badge"] = gr.Markdown()
                        with gr.Row():
                            with gr.Column():
                                ui["base_stats"] = gr.Markdown()
                                ui["base_text"] = gr.Textbox(label="Verifier only", lines=8)
                            with gr.Column():
                                ui["spec_stats"] = gr.Markdown()
                                ui["spec_text"] = gr.Textbox(label="Speculative", lines=8)
                        ui["race"] = gr.Plot(label="Tokens vs elapsed time", show_label=False)

        settings = [prompt, drafter, k, confidence, temperature, top_k, top_p, seed, max_new]
        needs_models = [draft_b, verify_b, next_b, step_b, reset_b, run_b, compare_b]

        def outputs(*names):
            return [ui[n] for n in names] + [ui["message"]]

        step_out = outputs("step_text", "step_status", "step_explain", "step_table", "step_cache", "step_ratio",
                           "step_dist")
        for button, action in ((draft_b, "draft"), (verify_b, "verify"), (next_b, "next"), (step_b, "step"),
                               (reset_b, "reset")):
            button.click(_handler(ui, partial(h.step, loader, action)), [session, *settings], step_out)
        run_names = ("run_text", "run_detail", "run_stats", "run_status", "run_ratio", "run_timing",
                     "run_acceptance", "run_tokens", "download")
        run_b.click(_streaming(ui, partial(h.run, loader)), [session, *settings], outputs(*run_names))
        stop_b.click(_handler(ui, h.stop), session, outputs("run_status"))
        upload.upload(_handler(ui, h.replay), [session, upload], outputs(*run_names))

        for where in ("run", "step"):
            ui[f"{where}_text"].select(_selected(ui, where), session, outputs(f"{where}_detail"))
        compare_b.click(_streaming(ui, partial(h.compare, loader)), [session, *settings],
                        outputs("base_text", "spec_text", "base_stats", "spec_stats", "badge", "race"))
        stop_cmp_b.click(_handler(ui, partial(h.stop, shown="badge")), session, outputs("badge"))

        def poll():
            done = loader.pair is not None or loader.error is not None
            return {progress: _progress_html(loader), info: loader.info(), timer: gr.Timer(active=not done),
                    **{b: gr.Button(interactive=loader.pair is not None) for b in needs_models}}

        timer.tick(poll, None, [progress, info, timer, *needs_models], show_progress="hidden")
        demo.load(poll, None, [progress, info, timer, *needs_models], show_progress="hidden")
    return demo


def _highlighted(label: str) -> gr.HighlightedText:
    return gr.HighlightedText(label=label, color_map=COLORS, show_legend=True, combine_adjacent=False,
                              show_inline_category=False, elem_classes="spec-text")


def _handler(ui: dict, fn, **extra):
    """A gradio listener for a plain handler taking the session, then the inputs' values."""
    def listener(session, *values):
        return _show(ui, {**fn(session, *values), **extra})
    return listener


def _streaming(ui: dict, fn):
    """The same for a handler that yields one view per round."""
    def listener(session, *values):
        for view in fn(session, *values):
            yield _show(ui, view)
    return listener


def _selected(ui: dict, where: str):
    def listener(session: h.Session, evt: gr.SelectData):
        return _show(ui, h.token_detail(session, evt.index, where))
    return listener


def _show(ui: dict, view: dict) -> dict:
    """A handler's named values to component updates; a bad setting shows its message, nothing else changes."""
    out = {ui[name]: value for name, value in view.items() if name != "error"}
    if "error" in view:
        out[ui["message"]] = f"**Error:** {view['error']}" if view["error"] else ""
        if view["error"]:
            gr.Warning(view["error"])
    return out


def launch(demo: gr.Blocks, host: str = "127.0.0.1", port: int = 7860, share: bool = False, **kwargs):
    return demo.queue(default_concurrency_limit=8).launch(server_name=host, server_port=port, share=share,
                                                           css=CSS, **kwargs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Speculative decoding teaching app")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also create a public gradio.live link")
    parser.add_argument("--draft", default=DEFAULT_DRAFT, help=f"draft model (default {DEFAULT_DRAFT})")
    parser.add_argument("--target", default=DEFAULT_TARGET, help=f"verifier model (default {DEFAULT_TARGET})")
    parser.add_argument("--device", default="auto", help="auto (MPS, then CUDA, then CPU), cpu, cuda or mps")
    parser.add_argument("--precision", default="auto", help="auto (measured per machine), float32, bfloat16, "
                                                             "float16, int8, int4")
    args = parser.parse_args(argv)
    loader = h.Loader(args.target, args.draft or None, args.device, args.precision).start()
    launch(build_demo(loader), args.host, args.port, args.share)


if __name__ == "__main__":
    main()

"""The step-through's "Download this round": the round on show, at its phase, as the slide
:func:`specdec.round_figure` draws (1920 x 1080), offered as SVG and as PNG.

The server sends the figure once per step, as a preview; the two buttons save it from the page: the SVG
as it is, the PNG drawn from it onto a 1920 x 1080 canvas by the browser, so the server needs no
rasteriser.
"""
from __future__ import annotations

from functools import partial

import gradio as gr

from specdec import Generation, round_figure
from specdec.teach.figure import generation_context
from specdec.teach.render import STEP_NAMES, output_text, segments

from .state import Loader, Session

NOTHING = "Nothing to download yet: step a round first (**Draft** or **Step round**)."
# Saves the preview's SVG as a file, or draws it on a canvas of the figure's size and saves that as PNG.
SAVE = """(kind) => {
  const svg = document.querySelector('#round-figure svg');
  if (!svg) return;
  const text = new XMLSerializer().serializeToString(svg);
  const name = (svg.getAttribute('data-name') || 'specdec-round') + '.' + kind;
  const save = (href) => { const a = document.createElement('a'); a.href = href; a.download = name;
    document.body.appendChild(a); a.click(); a.remove(); };
  if (kind === 'svg') {
    const url = URL.createObjectURL(new Blob([text], {type: 'image/svg+xml'}));
    save(url); setTimeout(() => URL.revokeObjectURL(url), 60000); return; }
  const img = new Image(), w = svg.viewBox.baseVal.width, h = svg.viewBox.baseVal.height;
  img.onload = () => { const c = document.createElement('canvas'); c.width = w; c.height = h;
    c.getContext('2d').drawImage(img, 0, 0, w, h); save(c.toDataURL('image/png')); };
  img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(text);
}"""


def figure_svg(session: Session, step_fit: tuple[float, float] | None = None) -> str | None:
    """The round on show at its phase, as an SVG; None before a round is on show."""
    walk = session.walk
    r = walk.shown
    if r is None:
        return None
    before = list(walk.rounds[:r.index])
    return round_figure(r, walk.phase, settings=session.settings, context=_context(session, before, r),
                        previous=before[-1] if before else None, step_fit=step_fit)


def _context(session: Session, before: list, r) -> str:
    """The text before the round: a live run's last tokens as the verifier read them (its chat template
    included); a replayed trace's prompt and output, which is all a trace keeps."""
    if isinstance(session.gen, Generation):
        return generation_context(session.gen, r)
    return f"{session.settings.prompt}\n{output_text(segments(before))}"


def update(loader: Loader, session: Session) -> list:
    """The note, the two buttons (usable once a round is on show) and the preview."""
    live = isinstance(session.gen, Generation)
    svg = figure_svg(session, loader.step_fit if live else None)
    if svg is None:
        return [NOTHING, gr.update(interactive=False), gr.update(interactive=False), ""]
    r, phase = session.walk.shown, session.walk.phase
    note = (f"**Download this round** (round {r.index + 1}, after {STEP_NAMES[phase]}) as a 1920×1080 figure for a "
            "slide: SVG scales without loss, PNG goes anywhere.")
    return [note, gr.update(interactive=True), gr.update(interactive=True), svg]


def figure_section(loader: Loader, session) -> dict:
    """The control, in the step-through tab; returns the event that refreshes it, to run after each step."""
    note = gr.Markdown(NOTHING)
    with gr.Row():
        svg_b = gr.Button("Download SVG", size="sm", interactive=False, scale=0, min_width=150)
        png_b = gr.Button("Download PNG", size="sm", interactive=False, scale=0, min_width=150)
    preview = gr.HTML("", elem_id="round-figure")  # drawn at the page's width (style.css)
    svg_b.click(None, None, None, js=f"() => ({SAVE})('svg')")
    png_b.click(None, None, None, js=f"() => ({SAVE})('png')")
    return dict(fn=partial(update, loader), inputs=session, outputs=[note, svg_b, png_b, preview],
                show_progress="hidden")

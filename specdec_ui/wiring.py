"""The gradio wiring every tab shares: what a tab's ``build`` receives (:class:`Page`), a view record shown
on its components, and a mistake answered at its field.

Each tab builds one component per field of its view record and shows a record by those fields
(:func:`view_outputs`). A :class:`~.views.Problem` changes nothing the page shows but the message at
the field it concerns (the field's hint line turns into the message), an alert next to the buttons
(where a narrow screen, whose sidebar is closed, still shows it) and the sidebar, opened. One
message per mistake, no toast: the field is checked as it is edited, with the run's own check, and
its message and the alerts about it go as soon as it holds a value a run takes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import partial

import gradio as gr

from specdec import ConfigError
from specdec_ui.markup import NO_TOKENS, plain_html
from specdec_ui.state import FORM, HINTS, Loader, check_field
from specdec_ui.views import UNCHANGED, Problem, Replayed, problem

PLOT_MIN_WIDTH = 360
# A field is checked whenever its value changes (typed, an example picked, a trace restored), and
# always its last value: a change made while the previous one is checked is checked after it.
AS_EDITED = dict(show_progress="hidden", queue=False, trigger_mode="always_last")
# A message at a field the sidebar has scrolled away from (a long form, a phone) is brought into
# view once the sidebar has opened.
SHOW_FIELD_ERROR = ("() => setTimeout(() => document.querySelector('.field-error')?.scrollIntoView({block: 'nearest'}), "
                    "400)")


@dataclass
class Page:
    """What every tab's ``build(page, tab_id)`` gets: the shared model loader, the browser session's
    state, the sidebar's form (a component per :data:`~.state.FORM` name) and the sidebar; and what the
    tabs leave for the page to wire once they are all built. A tab adds to ``needs_models`` the buttons
    that work once the models are loaded, to ``uploads`` each (upload event, file component) that
    replays a trace, and to ``on_upload`` what it shows of a replayed trace (:meth:`wire_uploads`).
    ``all_k``: the Step through tab's switch that Start here sets."""

    loader: Loader
    session: gr.State
    form: dict
    sidebar: gr.Sidebar
    needs_models: list = field(default_factory=list)
    uploads: list = field(default_factory=list)
    on_upload: list = field(default_factory=list)
    all_k: gr.Checkbox | None = None

    def wire_uploads(self) -> None:
        """Every tab that shows a replayed trace follows every upload, whichever tab holds the box."""
        for event, upload in self.uploads:
            for then in self.on_upload:
                then(event, upload)


def mistake(loader: Loader, name: str, value) -> str | None:
    """What a run would say of this one field holding ``value``, in the same words, or None where a
    run would take it."""
    try:
        check_field(name, value, loader.pair)
    except ConfigError as e:
        return problem(e, {name: value}).message
    return None


def hint(name: str, message: str | None = None):
    """The line under a field: the message of its mistake, or its hint."""
    # "" and not None where a field has no hint (the prompt): None would leave the message where it was
    return gr.update(info=message or HINTS.get(name) or "", elem_classes=["field-error"] if message else [])


def checked(loader: Loader, name: str, value):
    """A field's line once it holds ``value``."""
    return hint(name, mistake(loader, name, value))


def alert(name: str, message: str) -> str:
    """The pointer by a tab's buttons to a field's message."""
    return f"⚠ {message}" + ("" if name == "runs" else " (the field is in the Settings sidebar)")


def alert_follows(loader: Loader, name: str, value, about: str | None):
    """A tab's alert and the field it is about, once field ``name`` holds ``value``: an alert about
    that field goes when the value is one a run takes, else says the new value's mistake; an alert
    about anything else stays."""
    if about != name:
        return gr.skip(), gr.skip()
    message = mistake(loader, name, value)
    return (alert(name, message), name) if message else ("", None)


def text_views(prefix: str) -> tuple:
    """The colour-coded text, and the same text plain under a toggle with a button that copies it."""
    gr.Markdown("**Text by origin** — hover over or tab to a token, or to a red pin (a rejected draft), for its "
                "numbers")
    text = gr.HTML(NO_TOKENS)
    with gr.Accordion("Plain text (Copy copies the text itself)", open=False):
        plain = gr.HTML(plain_html(""), elem_id=f"{prefix}-plain")
        copy = gr.Button("Copy text", size="sm")
    copy.click(None, None, None, js=f"() => navigator.clipboard.writeText("
                                    f"document.querySelector('#{prefix}-plain pre').innerText)")
    return text, plain


def view_outputs(record, components: dict, form: dict, alert_box, sidebar, upload_message=None, loader=None,
                 about=None, hide_empty: tuple[str, ...] = ()):
    """The components of a view record in field order, then the form fields (whose hint lines carry
    messages), the alert, the field it is about, the sidebar and the upload message; and the
    function that turns a handler's result into their values. An alert about a field follows it as
    it is edited: gone once the field holds a value a run takes (checked with ``loader``'s models).
    ``hide_empty``: the HTML fields whose component is hidden while they are "" (no empty box)."""
    names = [f.name for f in fields(record)]
    assert set(components) == set(names), f"{record.__name__}: components {sorted(components)} != fields {names}"
    extra = [c for c in (alert_box, about, sidebar, upload_message) if c is not None]
    outputs = [components[n] for n in names] + list(form.values()) + extra
    skip = [gr.skip()] * len(names)

    def hints(bad: str | None = None, message: str = "") -> list:
        """Every field's hint (a run went through), or the message at the bad field alone: the
        message of another mistake stays until that field is fixed."""
        if bad is None:
            return [hint(name) for name in form]
        return [hint(name, message) if name == bad else gr.skip() for name in form]

    def tail(alert_text=None, field_=None, open_sidebar=False, upload_text=None) -> list:
        out = []
        if alert_box is not None:
            out.append(gr.skip() if alert_text is None else alert_text)
        if about is not None:
            out.append(gr.skip() if alert_text is None else field_)
        if sidebar is not None:
            out.append(gr.Sidebar(open=True) if open_sidebar else gr.skip())
        if upload_message is not None:
            out.append(gr.skip() if upload_text is None else upload_text)
        return out

    for name, component in form.items():
        component.change(partial(alert_follows, loader, name), [component, about], [alert_box, about], **AS_EDITED)

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
            elif name in hide_empty:
                value = gr.update(value=value, visible=value != "")
            elif isinstance(component, gr.DownloadButton):  # usable once there is a file
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
                    alert(result.field, result.message), result.field, open_sidebar=result.field in FORM)
            return skip + [gr.skip()] * len(form) + tail(f"⚠ {result.message}")
        if isinstance(result, Replayed):
            restored = [gr.update(value=result.form[name], info=HINTS.get(name) or "", elem_classes=[])
                        if name in result.form else gr.skip() for name in form]
            return values_of(result.view) + restored + tail("", upload_text="")
        if not first:
            return values_of(result) + [gr.skip()] * len(form) + tail()
        return values_of(result) + hints() + tail("", upload_text="")
    return outputs, show

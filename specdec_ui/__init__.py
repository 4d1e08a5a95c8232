"""The teaching app's UI: gradio layout, handlers and plotly charts around the ``specdec`` engine.

``specdec`` itself never imports gradio or plotly. Here:

* :mod:`.state` - the model loader, the settings form, a session, and the step-through as a small
  immutable object (:class:`~.state.Walkthrough`);
* :mod:`.views` - typed view records and the pure functions that fill them from traces;
* :mod:`.handlers` - what each button does: settings in, a view (or a :class:`~.views.Problem`) out;
* :mod:`.charts` - the plotly figures;
* :mod:`.layout` - the page, one function per tab, and the wiring of views to components.

``app.py`` at the repository root is the entry point.
"""

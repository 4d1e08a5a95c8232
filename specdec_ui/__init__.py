"""The teaching app's UI: the gradio page around the ``specdec`` engine, one module per tab.

``specdec`` itself never imports gradio or plotly. Here:

* :mod:`.tabs` - one module per tab (Rule, Step through, Run, Compare), each with its components, its
  view records, its handlers (plain functions: the form's values in, a view record or a
  :class:`~.views.Problem` out) and one ``build`` function that lays the tab out. A tab's code lives in
  its module; what several tabs share lives here, beside it;
* :mod:`.page` - the page: header, model form, settings sidebar, Start here, the notebooks' links, and
  the tabs in :data:`~.page.TABS` (a new tab is a module in ``tabs/`` and one name there); the CSS is
  ``style.css``, its colours and whitespace marks the one style's (:mod:`specdec.teach.style`);
* :mod:`.state` - the model loader, the settings form, a session, the step-through as a small
  immutable object (:class:`~.state.Walkthrough`), and the worker that pulls a run's rounds, one at a
  time on the shared models;
* :mod:`.views` - what the tabs' handlers share (a Problem, the settings read from the form, a run
  followed as it goes); :mod:`.wiring` - the gradio that shows a view record on its components;
* :mod:`.markup` - the HTML helpers (escaped text, its whitespace marked, colour-coded tokens);
* :mod:`.charts` - the plotly figures; :mod:`.tree_views` - a tree round's SVG, tests and mask;
  :mod:`.kinds` - drafts kept by kind of token; :mod:`.positions` - the tested positions of the round
  on show; :mod:`.figure_views` - the round as a slide; :mod:`.start` - Start here;
  :mod:`.notebooks` - the notebooks' pages.

``app.py`` at the repository root is the entry point.
"""

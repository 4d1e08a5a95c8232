"""Driving the launched app in Chromium: sizes, filling the form, finding things, and checks on what
a reader sees (contrast, labels that fit). The fixtures that launch the app are in
``tests/ui/browser/conftest.py``."""
from __future__ import annotations

import re
import socket

from playwright import sync_api

FIB = "Write a Python function that returns the n-th Fibonacci number iteratively."


SKY = "In three sentences, explain why the sky is blue."


ROUND_S = 120_000  # ms: generous waits for a round or two, the CPU may be shared


LAPTOP, PHONE = {"width": 1280, "height": 800}, {"width": 400, "height": 800}


sync_api.expect.set_options(timeout=ROUND_S)


expect = sync_api.expect


# The WCAG contrast ratio of an element's text against the first opaque background behind it.
CONTRAST = """e => {
  const rgb = c => c.match(/[\\d.]+/g).map(Number);
  const lum = c => { const [r, g, b] = rgb(c).slice(0, 3).map(v => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  let bg = 'rgb(255, 255, 255)';
  for (let n = e; n; n = n.parentElement) {
    const c = getComputedStyle(n).backgroundColor, v = rgb(c);
    if (v.length < 4 || v[3] > 0.9) { bg = c; break; } }
  const a = lum(getComputedStyle(e).color), b = lum(bg);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }"""


# The boxes of a plotly chart's labels: title, legend entries, tick labels, axis titles, notes.
CHART_LABELS = """plot => {
  const R = e => { const b = e.getBoundingClientRect(); return {x: b.left, y: b.top, w: b.width, h: b.height}; };
  const shown = sel => [...plot.querySelectorAll(sel)].filter(e => { const b = e.getBoundingClientRect();
    return b.width > 0 && b.height > 0 && e.textContent.trim() !== ''; });
  const groups = {title: '.gtitle', legend: '.legend .traces', xticks: '.xtick text', yticks: '.ytick text, .y2tick text',
    xtitle: '.g-xtitle text', ytitle: '.g-ytitle text, .g-y2title text', notes: '.annotation-text-g text'};
  const out = {box: R(plot), groups: {}};
  for (const [k, sel] of Object.entries(groups))
    out.groups[k] = shown(sel).map(e => ({...R(e), text: e.textContent,
      rotated: /rotate\\((?!0[,)])/.test(e.getAttribute('transform') || '')}));
  return out; }"""


# Label groups that must not meet each other (a group against itself: its members apart).
APART = [("title", "legend"), ("title", "notes"), ("title", "yticks"), ("title", "ytitle"), ("legend", "xticks"),
         ("legend", "xtitle"), ("legend", "notes"), ("legend", "legend"), ("xtitle", "xticks"), ("xtitle", "notes"),
         ("ytitle", "yticks"), ("xticks", "xticks")]


# What a token shows on focus: the CSS box drawn from its aria-label.
FOCUS_BOX = "e => getComputedStyle(e, '::after').content"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_app(browser, url, viewport=LAPTOP):
    context = browser.new_context(viewport=viewport)
    pg = context.new_page()
    pg.set_default_timeout(ROUND_S)
    pg.goto(url)
    pg.get_by_role("tab", name="Step through").click()  # the page opens on the lesson's first tab, Rule
    expect(pg.get_by_role("button", name="Step round")).to_be_enabled()
    pg.wait_for_timeout(500)  # the narrow-screen sidebar closes itself 300 ms after load
    return pg


def tokens(pg) -> list:
    """The colour-coded token elements of the visible token view."""
    return [t for t in pg.locator(".spec-tokens .tok").all() if t.is_visible()]


def fill(pg, prompt=FIB, k=4, temperature=0, max_new_tokens=12):
    pg.get_by_role("textbox", name=re.compile(r"^Prompt")).fill(prompt)
    pg.get_by_label("K (drafted tokens per round)").fill(str(k))
    pg.get_by_label("Draft confidence (0 = always K)").fill("0")  # every round drafts exactly K
    pg.get_by_label("Temperature (0 = greedy)").fill(str(temperature))
    pg.get_by_label("Max new tokens").fill(str(max_new_tokens))


def meet(a: dict, b: dict) -> bool:
    """Whether two bounding boxes overlap (by more than half a pixel)."""
    return not (a["x"] + a["width"] <= b["x"] + 0.5 or b["x"] + b["width"] <= a["x"] + 0.5 or
                a["y"] + a["height"] <= b["y"] + 0.5 or b["y"] + b["height"] <= a["y"] + 0.5)


def inside(box: dict, viewport: dict) -> bool:
    return box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]


def visible_plots(pg) -> int:
    return sum(p.is_visible() for p in pg.locator(".js-plotly-plot").all())


def status(pg, text) -> sync_api.Locator:
    """The step-through's status line (its bold words are markup, so match the text loosely)."""
    return pg.get_by_text(re.compile(re.escape(text)))


def assert_controls_in_view(pg, viewport):
    """Scrolled to the end of the drafted-token table, the step buttons are still on screen (sticky)."""
    table = pg.get_by_role("table", name="Drafted tokens")
    table.evaluate("t => t.scrollIntoView({block: 'end'})")
    pg.mouse.wheel(0, 400)
    pg.wait_for_timeout(300)
    assert pg.evaluate("window.scrollY") > 0                      # the page did scroll
    box = pg.get_by_role("button", name="Step round").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"], box


def boxes_meet(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (a["x"] + slack < b["x"] + b["w"] and b["x"] + slack < a["x"] + a["w"] and
            a["y"] + slack < b["y"] + b["h"] and b["y"] + slack < a["y"] + a["h"])


def assert_chart_labels_fit(pg, at_least: int = 1) -> None:
    """Every visible chart's labels lie inside its box and no two meet: the title, the legend, the
    tick labels, the axis titles and the notes (tick labels slanted by plotly are apart by design)."""
    plots = [p for p in pg.locator(".js-plotly-plot").all() if p.is_visible()]
    assert len(plots) >= at_least
    for plot in plots:
        plot.scroll_into_view_if_needed()
        info = plot.evaluate(CHART_LABELS)
        box, g, bad = info["box"], info["groups"], []
        for name, labels in g.items():
            bad += [f"{name} {e['text']!r} outside the chart" for e in labels
                    if e["x"] < box["x"] - 1 or e["y"] < box["y"] - 1 or e["x"] + e["w"] > box["x"] + box["w"] + 1
                    or e["y"] + e["h"] > box["y"] + box["h"] + 1]
        for a, b in APART:
            for i, e in enumerate(g[a]):
                for j, f in enumerate(g[b]):
                    if a == b and (j <= i or (a == "xticks" and (e["rotated"] or f["rotated"]))):
                        continue
                    if boxes_meet(e, f):
                        bad.append(f"{a} {e['text'][:40]!r} meets {b} {f['text'][:40]!r}")
        assert not bad, (g["title"][:1], bad)


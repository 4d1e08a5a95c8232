"""One round as a figure for a slide: a standalone SVG of 1920 x 1080 (16:9), readable when projected.

The figure shows what the step-through shows of a round up to a phase (draft, verify, accept, commit),
in the words :mod:`.render` and :mod:`.render_tree` give it: the context's tail; the drafted tokens
(a chain's table, or a tree's nodes with the kept path) with q, p, p/q and the draw u (none at
temperature 0: the rule then draws nothing); each verdict in the app's colours and as a word with a
symbol, so that no cue rests on colour alone; the token that ends the round and where it came from
(the residual norm(max(0, p − q)), the verifier's argmax at temperature 0, or the bonus from row K + 1
of the same forward, Leviathan et al. 2023, Algorithm 1); and both KV caches before and after.

Built as text, no plotting library: every token's text is escaped and its whitespace and control
characters shown as visible marks, so any token makes a valid SVG.
"""
from __future__ import annotations

import re
from html import escape
from pathlib import Path

from specdec.decode.registry import DRAFTERS, MODEL, TREE, needs_draft
from specdec.teach.render import (
    COLUMNS,
    DASH,
    STEP_NAMES,
    draft_depth,
    explain,
    position_rows,
)
from specdec.teach.render_tree import (
    AGAINST,
    TREE_HEADERS,
    VERDICT,
    sibling_quotients,
    tree_explain,
    tree_layout,
    tree_test_rows,
)
from specdec.teach.style import DRAFTED, EDGE_COLOR, FILL, INK, LINE, MARKS, MUTED
from specdec.trace import (
    ACCEPTED,
    AFTER_STOP,
    BONUS,
    PLAIN,
    REJECTED,
    RESAMPLED,
    ROOT,
    UNREACHED,
    UNTESTED,
    DraftStop,
    RoundTrace,
)

# The second cue: a symbol and a word that say the verdict without colour.
CUES = {ACCEPTED: "✓ kept", REJECTED: "✗ rejected", UNREACHED: "– not tested", AFTER_STOP: "– not emitted",
        UNTESTED: "– not tested", DRAFTED: "○ drafted", ROOT: "root", RESAMPLED: "↻ resampled", BONUS: "★ bonus",
        PLAIN: "● from p"}
KEY = {ACCEPTED: "✓ kept draft", REJECTED: "✗ rejected draft (not output)", UNREACHED: "– not tested",
       AFTER_STOP: "– not emitted: after a stop", UNTESTED: "– not tested", DRAFTED: "○ drafted, not tested yet",
       ROOT: "root: the last context token", RESAMPLED: "↻ resampled: ends the round", BONUS: "★ bonus: ends the round",
       PLAIN: "● drawn from p: nothing drafted"}

W, H, M = 1920, 1080, 60          # the slide, and its margin
TOP, BAND = 230, 820              # where the round's drawing starts; where the bottom panels start
# The three panels (x, y, width, height): along the bottom, or down the right for a tall, narrow tree
BOTTOM = ((M, BAND, 640, H - 24 - BAND), (M + 670, BAND, 600, H - 24 - BAND), (M + 1300, BAND, 500, H - 24 - BAND))
RIGHT_X = W - M - 620
RIGHT = ((RIGHT_X, TOP, 620, 212), (RIGHT_X, TOP + 226, 620, 226), (RIGHT_X, TOP + 466, 620, H - 24 - TOP - 466))
SANS = "'DejaVu Sans', 'Segoe UI', Arial, sans-serif"
MONO = "'DejaVu Sans Mono', Menlo, Consolas, monospace"
SANS_EM, BOLD_EM, MONO_EM = 0.6, 0.66, 0.61  # a character's advance, in em, for laying text out (DejaVu: at most)
BODY = 24                         # body text; nothing is smaller than 22 px when drawn at full size
GROW = 1.4                        # a small tree is drawn larger, to this scale at most
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")  # characters XML 1.0 cannot hold


def visible(text: str, limit: int = 0) -> str:
    """A token's text with its whitespace marked as the app marks it (· → ↵) and control characters as
    their pictures; cut to ``limit`` characters with an ellipsis."""
    out = "".join(MARKS.get(c) or _printable(c) for c in text) or "∅"
    return out if not limit or len(out) <= limit else out[:limit - 1] + "…"


def quoted(text: str) -> str:
    """A token in a sentence, as the table shows it: in quotes, its whitespace marked."""
    return f"'{visible(text)}'"


def _printable(c: str) -> str:
    o = ord(c)
    if o < 32:
        return chr(0x2400 + o)                      # ␍ for a carriage return, ␀ for NUL, ...
    if o == 127:
        return "␡"
    return "·" if c.isspace() else c                # a no-break or other Unicode space


def _xml(text: str) -> str:
    """Any text (a title, a model's name, a paragraph) escaped for XML, characters XML cannot hold replaced."""
    return escape(NOT_XML.sub("\ufffd", text))


def _width(text: str, px: float, mono: bool = False, bold: bool = False) -> float:
    return len(text) * px * (MONO_EM if mono else BOLD_EM if bold else SANS_EM)


def _wrap(text: str, width: float, px: float) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if line and _width(trial, px) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + ([line] if line else [])


def _wrap_items(items: list[str], width: float, px: float) -> list[str]:
    """Items joined by " · ", broken into lines between items only."""
    lines = [items[0]]
    for item in items[1:]:
        if _width(f"{lines[-1]} · {item}", px) > width:
            lines.append(item)
        else:
            lines[-1] += f" · {item}"
    return lines


def _fit(text: str, width: float, px: float, max_lines: int) -> list[str]:
    """``text`` wrapped to ``width``, whole sentences dropped from its end until it fits ``max_lines``."""
    sentences = re.split(r"(?<=[.:])\s+(?=[A-Z(])", text)
    while sentences:
        lines = _wrap(" ".join(sentences), width, px)
        if len(lines) <= max_lines:
            return lines
        sentences.pop()
    return _wrap(text, width, px)[:max_lines]


def _text(x: float, y: float, s: str, px: float = BODY, *, mono: bool = False, bold: bool = False, fill: str = INK,
          anchor: str = "start") -> str:
    weight = ' font-weight="bold"' if bold else ""
    family = f' font-family="{MONO}"' if mono else ""
    end = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{px:g}"{family}{weight}{end} fill="{fill}" '
            f'xml:space="preserve">{_xml(s)}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, line: str | None = None, width: float = 2,
          rx: float = 8) -> str:
    stroke = f' stroke="{line}" stroke-width="{width:g}"' if line else ""
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx:g}" fill="{fill}"{stroke}/>'


def _num(v: float) -> str:
    return f"{v:.3g}"


# ---- the figure -----------------------------------------------------------------------------

def round_figure(r: RoundTrace, phase: str = "commit", *, settings=None, context: str = "",
                 previous: RoundTrace | None = None, step_fit: tuple[float, float] | None = None,
                 title: str | None = None) -> str:
    """The round ``r`` as revealed up to ``phase`` (draft | verify | accept | commit), as a standalone SVG.

    ``settings``: the run's :class:`~specdec.RunSettings`, for the title (K, temperature, drafter, models) and
    temperature 0; without it the round's own draws say whether it was greedy. ``context``: the text before
    the round (the prompt and the output so far), of which the tail is shown. ``previous``: the round before,
    whose rollback left the draft's cache as this round found it (the first round's is the prompt's length
    minus one). ``step_fit``: this machine's verifier cost, as :func:`~specdec.teach.render.explain` takes it.
    ``title`` replaces the first line of the title."""
    if phase not in STEP_NAMES:
        raise ValueError(f"phase must be one of {', '.join(STEP_NAMES)} (got {phase!r})")
    greedy = settings.decode.sampling.greedy if settings is not None else _drew_nothing(r)
    tree = r.tree is not None
    heading = title or f"Speculative decoding, round {r.index + 1}{' (tree)' * tree}: after {STEP_NAMES[phase]}"
    parts = [_rect(0, 0, W, H, "#ffffff", rx=0), _text(M, 78, heading, 44, bold=True)]
    y = 78
    for line in _wrap_items(_settings_line(r, settings, greedy).split(" · "), W - 2 * M, 26)[:2]:
        y += 40
        parts.append(_text(M, y, line, 26, fill=MUTED))
    parts.append(_context(context, y + 46))
    if tree:
        story = tree_explain(r, phase, greedy, settings.decode.k if settings else max(n.depth for n in r.tree.nodes),
                             settings.decode.confidence if settings else 0.0, step_fit, quote=quoted, drawn=True)
        drawing, boxes = _tree(r, phase, greedy, story)
    else:
        story = explain(r, phase, settings.drafter if settings else MODEL.name, greedy, step_fit, quote=quoted)
        drawing, boxes = _chain(r, phase, greedy, story), BOTTOM
    parts += drawing
    parts += (_round_end(r, phase, greedy, *boxes[0]) + _caches(r, phase, previous, *boxes[1])
              + (_legend(r, phase, *boxes[2]) if len(boxes) > 2 else []))
    label = f"{heading}. {_settings_line(r, settings, greedy)}"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="{_xml(label)}" font-family="{SANS}" data-name="specdec-round-{r.index + 1}-{phase}">'
            f'<title>{_xml(label)}</title><desc>{_xml(story.replace("**", ""))}</desc>{"".join(parts)}</svg>')


def generation_context(gen, r: RoundTrace, tokens: int = 40) -> str:
    """The end of the context a round of ``gen`` (a :class:`~specdec.Generation`) began from, as the verifier
    read it: its last ``tokens`` tokens, special ones (the chat template's) included; the figure's line
    shows as many characters as fit."""
    ids = (gen.prompt_ids + gen.token_ids)[:r.context_len][-tokens:]
    return gen.pair.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def save_round_figure(r: RoundTrace, path, phase: str = "commit", **kw) -> Path:
    """Write :func:`round_figure` to ``path`` (an ``.svg`` file); returns the path."""
    path = Path(path)
    if path.suffix.lower() != ".svg":
        raise ValueError(f"path must end in .svg (got {path.name!r}): the figure is an SVG")
    path.write_text(round_figure(r, phase, **kw), encoding="utf-8")
    return path


def _tested(r: RoundTrace) -> list:
    """The drafts the rule tested: a chain's positions, or a tree's nodes."""
    return ([n for n in r.tree.nodes if n.status in (ACCEPTED, REJECTED)] if r.tree is not None else
            [p for p in r.positions if p.tested])


def _drew_nothing(r: RoundTrace) -> bool:
    """Temperature 0 as the round shows it: tests were made and none drew a u."""
    tested = _tested(r)
    return bool(tested) and all(t.u is None for t in tested)


def _settings_line(r: RoundTrace, settings, greedy: bool) -> str:
    if settings is None:
        return "temperature 0 (greedy)" if greedy else "temperature above 0" if _tested(r) else "settings not given"
    d, s = settings.decode, settings.decode.sampling
    out = [f"K = {d.k}"]
    if r.tree is not None:
        out.append(f"W = {r.tree.width}, N = {r.tree.budget}")
    out.append("temperature 0 (greedy)" if greedy else f"temperature {s.temperature:g}")
    if not greedy:                      # top-k, top-p and the seed shape only sampling
        out += [f"top-k {s.top_k}"] * bool(s.top_k) + [f"top-p {s.top_p:g}"] * (s.top_p < 1) + [f"seed {d.seed}"]
    out += [_draft_stop(r, d.k, d.confidence)] * bool(d.confidence or r.draft_stop == DraftStop.CONFIDENCE)
    drafter = DRAFTERS[settings.drafter].label
    if settings.drafter == TREE.name and (r.tree is None or r.tree.width == 1):  # a chain: W = 1, or Adaptive K's choice
        drafter += " (this round a chain, chosen by Adaptive K)" if r.plan is not None else " (ran as a chain: W = 1)"
    out.append(f"drafter: {drafter}")
    m = settings.models
    out.append(f"verifier {m.target.removeprefix('embedded:')} ({m.precision})")
    if m.draft and needs_draft(settings.drafter):
        out.append(f"draft {m.draft.removeprefix('embedded:')} ({m.draft_precision})")
    return " · ".join(out)


def _draft_stop(r: RoundTrace, k: int, confidence: float) -> str:
    """The draft's confidence threshold, and whether it stopped drafting short of K (the data
    :func:`~specdec.teach.render.draft_stop_text` says in a sentence)."""
    if r.draft_stop != DraftStop.CONFIDENCE:
        return f"draft confidence {confidence:g}"
    n = draft_depth(r) if r.tree is not None else len(r.positions)
    return f"draft confidence {confidence:g}: stopped after {n} of {k}" + (" depths" if r.tree is not None else "")


def _context(context: str, y: float) -> str:
    label = "Context (its end):"
    room = int((W - 2 * M - _width(label, BODY) - 20) / (BODY * MONO_EM))
    tail = visible(context) if context else "(not given)"
    tail = tail if len(tail) <= room else "…" + tail[-(room - 1):]
    return _text(M, y, label, BODY, bold=True) + _text(M + _width(label, BODY) + 20, y, tail, BODY, mono=True)


# ---- a chain: the drafted tokens as a table, and what the phase did beside it ------------------

def _chain(r: RoundTrace, phase: str, greedy: bool, story: str) -> list[str]:
    decided = COLUMNS[phase] > 5
    verified = COLUMNS[phase] >= 5
    headers = ["#", "token", "q(x)"] + ["p(x)"] * verified + (["p/q"] + ["u"] * (not greedy) + ["verdict"]) * decided
    columns = [2] + [4] * verified + ([5] + [6] * (not greedy)) * decided  # of position_rows: q, p, p/q, u
    rows = []
    for i, (row, pos) in enumerate(zip(position_rows(r, phase), r.positions)):
        # the numbers unrounded; the dashes where position_rows has them (an untested draft has no p, p/q or u)
        numbers = {2: pos.q, 4: pos.p, 5: pos.ratio, 6: pos.u}
        cells = [str(i + 1), visible(pos.text, 16)] + [DASH if row[k] == DASH else _num(numbers[k]) for k in columns]
        if decided:
            cells.append(f"{CUES[pos.status][0]} {row[7]}")
        rows.append((pos.status if decided else DRAFTED, pos, cells))
    out = []
    right = M + 1300                      # the table's room; the phase's story to its right
    if not rows:
        out.append(_text(M, TOP + 40, "Nothing was drafted this round: one plain verifier step.", 28, bold=True))
    elif len(rows) <= 3:                  # a few drafts: larger rows across the slide, the story below them
        table, bottom = _table(headers, rows, W - 2 * M, 150.0)
        return out + table + _story(story, M, bottom + 44, W - 2 * M, BAND - 30 - bottom - 44, 28)
    else:
        out += _table(headers, rows, right - M - 40)[0]
    return out + _story(story, right, TOP + 10, W - M - right, BAND - 30 - TOP - 10, 22)


def _story(story: str, x: float, y: float, w: float, h: float, px: float) -> list[str]:
    """The phase's paragraph under the heading "What happened", in a box at (x, y) of w x h: whole
    sentences dropped from its end where it does not fit."""
    step = round(px * 1.32)
    out = [_text(x, y, "What happened", 26, bold=True)]
    for j, line in enumerate(_fit(story.replace("**", "").split(". ", 1)[-1], w, px, max(1, int((h - 38) // step)))):
        out.append(_text(x, y + 38 + step * j, line, px))
    return out


def _table(headers: list[str], rows: list, room: float, cap: float = 76.0) -> tuple[list[str], float]:
    """The drafts' table, rows up to ``cap`` px tall, and where it ends."""
    n, tall = len(rows), BAND - 30 - TOP - 56
    row_h = max(34.0, min(cap, tall / n))
    shown = rows if row_h * n <= tall else rows[:int(tall // row_h) - 1]
    mono = [h == "token" for h in headers]
    for px in [size for size in (40, 34, 30, 26, 22) if row_h >= size * 2.2 or size == 22]:  # the largest that fits
        widths = [max(_width(h, 22, bold=True), *(_width(c[k], px, mono[k], h == "verdict") for _, _, c in shown)) + 28
                  for k, h in enumerate(headers)]
        if sum(widths) <= room:
            break
    extra = max(0.0, room - sum(widths))
    widths[-1] += extra                   # the last column takes what is left: verdicts are the longest
    xs = [M + sum(widths[:k]) for k in range(len(widths))]
    out = [_text(x + 14, TOP + 30, h, 22, bold=True, fill=MUTED) for x, h in zip(xs, headers)]
    out.append(f'<line x1="{M}" y1="{TOP + 44}" x2="{M + sum(widths):.1f}" y2="{TOP + 44}" stroke="{MUTED}" '
               f'stroke-width="2"/>')
    y = TOP + 52
    for status, pos, cells in shown:
        story = f"position {cells[0]}, {quoted(pos.text)}: " + ", ".join(f"{h} {c}" for h, c in zip(headers[2:], cells[2:]))
        out.append(f'<g class="draft-row" data-status="{status}"><title>{_xml(story)}</title>'
                   + _rect(M, y, sum(widths), row_h - 6, FILL[status], rx=6)
                   + _rect(M, y, 10, row_h - 6, LINE[status], rx=3)
                   + "".join(_text(x + 14, y + (row_h - 6) / 2 + px * 0.36, c, px, mono=m, bold=h == "verdict")
                             for x, c, m, h in zip(xs, cells, mono, headers)) + "</g>")
        y += row_h
    if len(shown) < n:
        rest = rows[len(shown):]
        kinds = ", ".join(f"{sum(s == k for s, _, _ in rest)} {CUES[k][2:]}" for k in dict.fromkeys(s for s, _, _ in rest))
        out.append(_text(M + 14, y + 28, f"… and {n - len(shown)} more drafts ({kinds})", 22, fill=MUTED))
        y += 40
    return out, y


# ---- a tree: its nodes, the kept path thick -----------------------------------------------------

def _tree(r: RoundTrace, phase: str, greedy: bool, story: str) -> tuple[list[str], tuple]:
    """The tree's drawing with the phase's story, and where the panels go: along the bottom (the story
    to the tree's right), or down the right where that leaves a tall, narrow tree drawn larger (the
    story below it)."""
    t, nodes = r.tree, list(r.tree.nodes)
    decided = phase in ("accept", "commit")
    parents, depth, row = tree_layout(r, phase)
    final = len(parents) > len(nodes)  # the token that ends the round is drawn too
    kinds = [ROOT] + [n.status if decided else DRAFTED for n in nodes[1:]] + ([r.next_kind] if final else [])
    labels, tests = [], _tree_tests(r, greedy) if decided else {}
    after = _after_rejection(r, greedy) if decided else {}
    for j, kind in enumerate(kinds):
        if j == len(nodes):
            how = "the argmax" if greedy and r.next_kind == RESAMPLED else (
                "from p" if r.next_kind in (BONUS, PLAIN) else "from the residual")
            labels.append((visible(r.next_token.text, 12), how, CUES[kind], ""))
        else:
            n = nodes[j]
            nums = "last in context" if j == 0 else f"q {n.q:.2g}" + (f" · p {n.p:.2g}" if phase != "draft" else "")
            if j in after:
                nums = f"r {_num(after[j][0])} · q′ {_num(after[j][1])}"
            labels.append((f"{j} {visible(n.text, 12)}", nums, CUES[kind], tests.get(j, "")))
    box_w = [max(_width(a, 26, True), _width(b, 22), _width(c, 22, bold=True), _width(d, 22)) + 28
             for a, b, c, d in labels]
    # a line more for the tests, the lines closer: the boxes grow by less than a line
    (box_h, gap_y, pitch, gap_x) = (112, 4, 25, 30) if tests else (96, 12, 27, 40)
    cols = max(depth) + 1
    col_w = [max(w for w, d in zip(box_w, depth) if d == c) for c in range(cols)]
    col_x = [sum(col_w[:c]) + gap_x * c for c in range(cols)]
    width, height = col_x[-1] + col_w[-1], (max(row) + 1) * (box_h + gap_y) - gap_y
    aside = 520                           # the story's column beside a tree above the panels
    below = min(GROW, (W - 2 * M - aside - 40) / width, (BAND - 40 - TOP) / height)
    beside = min(GROW, (RIGHT_X - 40 - M) / width, (H - 24 - TOP) / height)
    if below >= beside:
        scale, boxes, room = below, BOTTOM, W - 2 * M - aside - 40
        told = _story(story, W - M - aside, TOP + 10, aside, BAND - 30 - TOP - 10, 22)
    else:                                 # the story in the key's place: each node says its verdict in words
        scale, boxes, room = beside, RIGHT[:2], RIGHT_X - 40 - M
        x3, y3, w3, h3 = RIGHT[2]
        told = (_panel(x3, y3, w3, h3, "")[:1] + _story(story, x3 + 20, y3 + 38, w3 - 40, h3 - 70, 22)
                + [_text(x3 + 20, y3 + h3 - 16, "· space  → tab  ↵ line break", 22, fill=MUTED)])
    x0 = M + (room - width * scale) / 2
    x = [col_x[d] for d in depth]
    y = [v * (box_h + gap_y) for v in row]
    path = set(t.kept) | {0}
    out = [f'<g transform="translate({x0:.1f},{TOP}) scale({scale:.3f})">']
    for j in range(1, len(parents)):
        a = parents[j]
        kept = decided and j in path and a in path
        ends = j == len(nodes)
        x1, y1, x2, y2 = x[a] + box_w[a], y[a] + box_h / 2, x[j], y[j] + box_h / 2
        mid = (x1 + x2) / 2
        colour = LINE[ACCEPTED] if kept else LINE[kinds[j]] if ends else EDGE_COLOR
        dash = ' stroke-dasharray="10 6"' if ends else ""
        out.append(f'<path d="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" fill="none" '
                   f'stroke="{colour}" stroke-width="{6 if kept else 3}"{dash}/>')
    for j, ((top, mid_line, cue, test), kind) in enumerate(zip(labels, kinds)):
        cls = "round-end" if j == len(nodes) else "tree-node"
        out.append(f'<g class="{cls}" data-status="{kind}"><title>{_xml(_node_story(r, j, phase, kind))}</title>'
                   + _rect(x[j], y[j], box_w[j], box_h, FILL[kind], LINE[kind], 5 if decided and j in t.kept else 2.5)
                   + _text(x[j] + 14, y[j] + pitch + 4, top, 26, mono=True)
                   + _text(x[j] + 14, y[j] + 2 * pitch + 4, mid_line, 22)
                   + _text(x[j] + 14, y[j] + 3 * pitch + 4, cue, 22, bold=True)
                   + (_text(x[j] + 14, y[j] + 4 * pitch + 2, test, 22) if test else "") + "</g>")
    out.append("</g>")
    if scale < 1:
        out.append(_text(M, TOP + height * scale + 34, f"drawn at {scale:.0%} to fit the slide", 22, fill=MUTED))
    return out + told, boxes


def _after_rejection(r: RoundTrace, greedy: bool) -> dict[int, tuple[float, float]]:
    """(r(x), q′(x)) of each child tested after a rejected sibling (temperature > 0): the residual that
    rejection left and q renormalised without the rejected tokens, what its ratio divides; its box shows
    them in place of its p and q, which do not give that ratio."""
    if greedy:
        return {}
    nodes = r.tree.nodes
    return {j: v for j, v in sibling_quotients(r).items() if v[1] != nodes[j].q}


def _tree_tests(r: RoundTrace, greedy: bool) -> dict[int, str]:
    """Each tested node's test, as the chain's table gives it: the ratio it was kept by and its draw u
    (none at temperature 0): p/q of the box's numbers, or r/q′ after a rejected sibling."""
    nodes, after = r.tree.nodes, _after_rejection(r, greedy)
    return {j: f"{'r/q′' if j in after else 'p/q'} {_num(n.ratio)}" + (f" · u {_num(n.u)}" if n.u is not None else "")
            for j, n in enumerate(nodes) if n.status in (ACCEPTED, REJECTED)}


def _node_story(r: RoundTrace, j: int, phase: str, kind: str) -> str:
    if j == len(r.tree.nodes):
        return f"{quoted(r.next_token.text)}, {r.next_kind}, probability {r.next_token.prob:.3g}"
    n = r.tree.nodes[j]
    if j == 0:
        return f"node 0 {quoted(n.text)}: the root, the last context token"
    out = f"node {j} {quoted(n.text)}, depth {n.depth}, child of node {n.parent}: q {n.q:.4f}"
    out += f", p {n.p:.4f}" if phase != "draft" else ""
    return out + (f": {CUES[kind][2:]}" if kind != DRAFTED else "")


# ---- the bottom band: the token that ends the round, the caches, the key -------------------------

def _panel(x: float, y: float, w: float, h: float, heading: str) -> list[str]:
    return [_rect(x, y, w, h, "#f9fafb", "#d1d5db", 2), _text(x + 20, y + 38, heading, 26, bold=True)]


def _round_end(r: RoundTrace, phase: str, greedy: bool, x: float, y: float, w: float, h: float) -> list[str]:
    out = _panel(x, y, w, h, "The token that ends the round")
    if phase in ("draft", "verify"):
        return out + [_text(x + 20, y + 84 + 30 * j, line, 22, fill=MUTED) for j, line in enumerate(_wrap(
            "Not decided yet: after Accept/reject, the token drawn from the residual at the first rejection, or the "
            "bonus from row K + 1 when every draft is kept.", w - 40, 22))]
    if r.next_token is None:
        stop = r.positions[r.n_accepted - 1].text
        return out + [_text(x + 20, y + 84 + 30 * j, line, 22) for j, line in enumerate(_wrap(
            f"None: the kept draft '{visible(stop)}' is a stop token, so the output ends there.", w - 40, 22))]
    token, cue = visible(r.next_token.text, 16), f"   {CUES[r.next_kind]}"
    chip_w = _width(token, 30, True) + _width(cue, 24) + 36
    out.append(f'<g class="round-end" data-status="{r.next_kind}">'
               + _rect(x + 20, y + 56, chip_w, 50, FILL[r.next_kind], LINE[r.next_kind], 3)
               + _text(x + 38, y + 92, token, 30, mono=True)
               + _text(x + 38 + _width(token, 30, True), y + 91, cue, 24, bold=True) + "</g>")
    for j, line in enumerate(_wrap(_source(r, greedy), w - 40, 22)[:3]):
        out.append(_text(x + 20, y + 140 + 29 * j, line, 22))
    return out


def _source(r: RoundTrace, greedy: bool) -> str:
    """Where the token that ends the round came from, in one or two sentences."""
    p = f"probability {r.next_token.prob:.3g}"
    if r.tree is not None:
        row = tree_test_rows(r, greedy, quoted)[-1][1]   # the row of the token that ended the round
        how = row[TREE_HEADERS.index(VERDICT)].replace("drawn from it", f"drawn from {row[TREE_HEADERS.index(AGAINST)]}")
        return f"{how[0].upper()}{how[1:]}" + (f", after node {row[1]}." if r.next_kind == RESAMPLED else ".")
    if r.next_kind == BONUS:
        where = f"row K + 1 = {r.drafted + 1} of the same verifier forward: every draft was kept"
        return (f"Bonus: the verifier's argmax at {where}." if greedy else f"Bonus: drawn from p at {where} ({p}).")
    if r.next_kind == PLAIN:
        return f"Drawn from p: nothing was drafted, a plain verifier step ({p})."
    i, x = r.rejected_at, f"'{visible(r.positions[r.rejected_at].text)}'"
    if greedy:
        return f"The verifier's argmax at position {i + 1}, in place of the rejected draft {x}."
    return f"Drawn from the residual norm(max(0, p − q)) at position {i + 1}, where {x} was rejected ({p})."


def _caches(r: RoundTrace, phase: str, previous: RoundTrace | None, x: float, y: float, w: float, h: float
            ) -> list[str]:
    out = _panel(x, y, w, h, "KV caches (entries)")
    heads = ["before the round", "after the forwards", "after the path is kept" if r.tree else "after the rollback"]
    cols = [x + w - 420 + 140 * k for k in range(3)]   # each column's centre
    for cx, head in zip(cols, heads):
        for j, line in enumerate(_wrap(head, 150, 22)):
            out.append(_text(cx, y + 76 + 26 * j, line, 22, fill=MUTED, anchor="middle"))
    verifier = [r.context_len - 1, DASH if phase == "draft" else r.target_cache[0],
                r.target_cache[1] if phase == "commit" else DASH]
    table = [("verifier", verifier)]
    if r.draft_cache is not None:
        before = (previous.draft_cache[1] if previous is not None and previous.draft_cache is not None else
                  r.context_len - 1 if r.index == 0 else DASH)
        table.append(("draft", [before, r.draft_cache[0], r.draft_cache[1] if phase == "commit" else DASH]))
    for k, (name, values) in enumerate(table):
        yy = y + 166 + 44 * k
        out.append(_text(x + 20, yy, name, 26, bold=True))
        out += [_text(cx, yy, str(v), 30, bold=True, anchor="middle") for cx, v in zip(cols, values)]
    return out


def _legend(r: RoundTrace, phase: str, x: float, y: float, w: float, h: float) -> list[str]:
    out = _panel(x, y, w, h, "Key")
    decided = phase in ("accept", "commit")
    if r.tree is not None:
        kinds = [ROOT] + [n.status if decided else DRAFTED for n in r.tree.nodes[1:]]
    else:
        kinds = [p.status if decided else DRAFTED for p in r.positions]
    if decided and r.next_kind is not None:
        kinds.append(r.next_kind)
    entries = [(k, KEY[k]) for k in dict.fromkeys(kinds)][:5]
    for j, (k, words) in enumerate(entries):
        yy = y + 58 + 30 * j
        out.append(_rect(x + 20, yy, 22, 22, FILL[k], LINE[k], 2, rx=4) + _text(x + 52, yy + 19, words, 22))
    out.append(_text(x + 20, y + 58 + 30 * len(entries) + 20, "· space  → tab  ↵ line break", 22, fill=MUTED))
    return out

"""A tree round in the step-through: the token tree as measured SVG boxes, the rule's sibling tests as a
table and the verifier's tree attention mask as a grid (SpecInfer, Miao et al. 2023).

Pure functions of a :class:`~specdec.trace.RoundTrace` whose ``tree`` is set and the phase
revealed so far: ``draft`` shows the nodes and their q, ``verify`` adds p and the mask, ``accept``
the verdicts, the tests and the token that ends the round. p = verifier, q = draft. The boxes take
the colours of the round's figure (:mod:`specdec.teach.style`). Also the words for the shape the tree
drafter ran, which the Step through and Run tabs both say, and the real tree the former offers.
"""
from __future__ import annotations

from html import escape

from specdec.decode import registry
from specdec.decode.tree import mask_grid
from specdec.teach.figure import visible
from specdec.teach.render import DASH
from specdec.teach.render_tree import (
    AGAINST,
    GREEDY_OMITS,
    R_AFTER,
    TREE_HEADERS,
    VERDICT,
    tree_layout,
    tree_test_rows,
)
from specdec.teach.style import DRAFTED, EDGE_COLOR, FILL, LINE, MUTED
from specdec.trace import (
    ACCEPTED,
    BONUS,
    PLAIN,
    REJECTED,
    RESAMPLED,
    ROOT,
    UNTESTED,
    RoundTrace,
)

NAMES = {ROOT: "root: the last context token", DRAFTED: "drafted (not tested yet)", ACCEPTED: "kept: the accepted path",
         REJECTED: "rejected (tested)", UNTESTED: "not tested", RESAMPLED: "resampled: ends the round",
         BONUS: "bonus: ends the round", PLAIN: "drawn from p: nothing drafted"}


# (W, N, draft confidence) of the "Draw a real tree" button: a tree on every machine, small enough to read;
# confidence 0 so that every round grows to its N nodes (a threshold stops an unsure tree at its first level)
REAL_TREE = (2, 8, 0.0)
REAL_TREE_BUTTON = "Draw a real tree"


def requested(settings) -> bool:
    """Not the tree drafter, or a tree shape the learner set in full: nothing to explain."""
    return settings.drafter != registry.TREE.name or bool(settings.decode.tree_width and settings.decode.tree_nodes)


def shape_text(width: int, nodes: int, why: str) -> str:
    """Which shape the tree drafter ran and why (``why`` as the run recorded it, :func:`specdec.decode.tree_shape.resolve`)."""
    if width > 1:
        return f"**The tree drafter's shape:** {why}."
    return (f"**The tree drafter ran the chain.** {why}. So each round is a chain of drafts: no tree, no attention "
            "mask, no sibling tests.")


def _token(text: str) -> str:
    """A token in a box: whitespace made visible as the round's figure shows it, short."""
    return visible(text, 10)


def _why_untested(r: RoundTrace, j: int) -> str:
    nodes = r.tree.nodes
    a = nodes[j].parent
    if a == 0 or a in r.tree.kept:
        return "a sibling before it was kept first"
    return "its parent was not on the accepted path"


def _hover(r: RoundTrace, j: int, phase: str, greedy: bool) -> str:
    nodes = r.tree.nodes
    if j == len(nodes):
        how = "drawn from p after the leaf" if r.next_kind in (BONUS, PLAIN) else (
            "the verifier's argmax: no child was it" if greedy else "drawn from the residual the last rejection left")
        return f"{r.next_token.text!r}, {r.next_kind}: {how}, probability {r.next_token.prob:.3g}"
    n = nodes[j]
    if j == 0:
        return f"node 0 {n.text!r}: the root, the last context token (its children are tested first)"
    out = (f"node {j} {n.text!r}, depth {n.depth}, child of node {n.parent}\nq = {n.q:.4f} (the "
           f"draft's, at its parent); path q = {n.path_q:.3g} (the product of q along the path, how the draft ranked it)")
    if phase != "draft":
        out += f"\np = {n.p:.4f} (the verifier's, at its parent)"
    if phase in ("accept", "commit"):
        if n.status == UNTESTED:
            out += f"\nnot tested: {_why_untested(r, j)}"
        elif greedy:  # temperature 0: no draw, the child is the argmax or it is not
            out += "\nkept: the verifier's argmax" if n.status == ACCEPTED else "\nrejected: not the verifier's argmax"
        else:
            out += f"\nratio = {n.ratio:.3f}, u = {n.u:.3f}: {'kept' if n.status == ACCEPTED else 'rejected'}"
    return out


def tests_html(r: RoundTrace, greedy: bool) -> str:
    """The rule's tests in the order it ran them, as an accessible table, and what its words mean.
    Each cell carries its column's name, which a narrow screen shows beside the value when it lays
    each test out as a card (ten columns do not fit 400 px)."""
    # at temperature 0 no ratio is formed, no u drawn and no residual left: those columns are left out, not dashed
    keep = [i for i, h in enumerate(TREE_HEADERS) if not (greedy and h in GREEDY_OMITS)]
    headers = [TREE_HEADERS[i] for i in keep]
    head = "".join(f'<th scope="col">{escape(h)}</th>' for h in headers)
    body = []
    for status, row in tree_test_rows(r, greedy):
        row = [row[i] for i in keep]
        cells = "".join(f'<td class="{_cell_class(h, c)}" data-label="{escape(h, quote=True)}">'
                        f'{escape(str(c))}</td>' for h, c in zip(headers[1:], row[1:]))
        body.append(f'<tr class="row-{status}"><th scope="row">{row[0]}</th>{cells}</tr>')
    if greedy:
        note = ("At temperature 0 the test is whether the child is the verifier's argmax after its parent: no ratio "
                "is formed, no u is drawn and no residual is left. Children are tested in order, top to bottom "
                "in the tree")
    else:
        note = ("r(x): what the child is tested against at x: p(x) for a first child; after a rejection, the "
                "residual norm(max(0, r − q′)) the rejection left. q′(x): q without the tokens of the siblings "
                "rejected before it, renormalised, q′(x) = q(x) / (1 − the sum of their q); q(x) for a first child. "
                "ratio = r(x)/q′(x), so p/q for a first child; a child is kept iff u ≤ ratio; r after it: the top "
                "of the residual a rejection left, what the next sibling (or the final draw) is tested against; on "
                "the last row, the top of what the token was drawn from")
    return (f'<div class="spec-table spec-tests"><table aria-label="Sibling tests"><caption>The rule\'s tests, in '
            f'order, round {r.index + 1}</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="spec-note">{escape(note)}. q(x), p(x): the draft\'s and the verifier\'s probability of the '
            f'child after its parent.</p></div>')


WIDE = (AGAINST, VERDICT, R_AFTER)  # the columns of sentences: a card on a narrow screen gives them a line


def _cell_class(header: str, cell) -> str:
    return " ".join(c for c, on in (("dash", cell == DASH), ("wide", header in WIDE)) if on)


def mask_html(r: RoundTrace, phase: str) -> str:
    """The tree part of the verifier's attention mask (nodes x nodes), the accepted path's rows
    marked once the verdicts are revealed."""
    nodes = r.tree.nodes
    grid = mask_grid([n.parent for n in nodes])
    kept = set(r.tree.kept) if phase in ("accept", "commit") else set()
    head = "".join(f'<th scope="col">{j}</th>' for j in range(len(nodes)))
    rows = []
    for i, row in enumerate(grid):
        cells = "".join('<td class="on" aria-label="attends">●</td>' if on else "<td></td>" for on in row)
        mark = ' class="row-accepted"' if i in kept else ""
        rows.append(f'<tr{mark}><th scope="row">{i} {escape(_token(nodes[i].text))}</th>{cells}</tr>')
    return (f'<div class="spec-table spec-mask"><table aria-label="Tree attention mask"><caption>Tree attention mask, '
            f'round {r.index + 1}</caption><thead><tr><th scope="col">row i \\ column j</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table><p class="spec-note">Row i may attend column j; every row also '
            f'sees the whole context. ● = attends: a node sees the root and its own ancestors, never a sibling or '
            f'another branch.</p></div>')


# ---- the tree as measured boxes (SVG) ----------------------------------------------------------
# Token text is set in a monospace face, so a box's width follows from its characters: columns
# (depths) are as wide as their widest box, rows (leaves, in test order) as tall as a box, and no
# two boxes can meet. The drawing keeps its natural size and scrolls inside its own box if it must.
TOKEN_PX, NUMBER_PX = 14, 12       # font sizes: the token, and the q / p line under it
CHAR = 0.61                        # a monospace character's advance, in em (DejaVu Sans Mono 0.602)
PAD, GAP_X, GAP_Y, BOX_H = 8, 34, 10, 40


def _label(r: RoundTrace, j: int, phase: str) -> tuple[str, str]:
    """A node's two lines: its number and token, then its q (and p once verified)."""
    nodes = r.tree.nodes
    if j == len(nodes):
        return _token(r.next_token.text), r.next_kind
    n = nodes[j]
    if j == 0:
        return f"{j} {_token(n.text)}", "root"
    return f"{j} {_token(n.text)}", f"q {n.q:.2f}" + (f"  p {n.p:.2f}" if phase != "draft" else "")


def _width(line: str, px: int) -> float:
    return len(line) * CHAR * px


def tree_html(r: RoundTrace, phase: str, greedy: bool, asked: tuple[int, int] = (0, 0)) -> str:
    """The round's token tree, depth left to right, siblings stacked in test order from the top,
    each node a box with its number, token, q and p (hover or focus a node for its story), the
    accepted path drawn thick once the verdicts are revealed. ``asked``: the settings' W and N, 0
    for this machine's choice (an adaptive round's are its plan's)."""
    t = r.tree
    nodes = list(t.nodes)
    decided = phase in ("accept", "commit")
    parents, depth, row = tree_layout(r, phase)
    final = len(parents) > len(nodes)  # the token that ends the round is drawn too
    labels = [_label(r, j, phase) for j in range(len(parents))]
    box_w = [max(_width(a, TOKEN_PX), _width(b, NUMBER_PX)) + 2 * PAD for a, b in labels]
    col_w = [max(w for w, d in zip(box_w, depth) if d == c) for c in range(max(depth) + 1)]
    col_x = [sum(col_w[:c]) + GAP_X * c for c in range(len(col_w))]
    x = [col_x[d] for d in depth]
    y = [v * (BOX_H + GAP_Y) for v in row]
    width, height = col_x[-1] + col_w[-1] + 2, (max(row) + 1) * (BOX_H + GAP_Y)
    path = set(t.kept) | {0}
    kinds = [(n.status if decided or n.status == ROOT else DRAFTED) for n in nodes] + ([r.next_kind] if final else [])
    edges = []
    for j in range(1, len(parents)):
        a = parents[j]
        kept = decided and j in path and a in path
        x0, y0, x1, y1 = x[a] + box_w[a], y[a] + BOX_H / 2, x[j], y[j] + BOX_H / 2
        mid = (x0 + x1) / 2
        edges.append(f'<path d="M{x0:.1f},{y0:.1f} C{mid:.1f},{y0:.1f} {mid:.1f},{y1:.1f} {x1:.1f},{y1:.1f}" '
                     f'fill="none" stroke="{LINE[ACCEPTED] if kept else EDGE_COLOR}" stroke-width="{3 if kept else 1.5}"/>')
    boxes = []
    for j, ((top, bottom), kind) in enumerate(zip(labels, kinds)):
        tip = escape(_hover(r, j, phase, greedy), quote=True)
        boxes.append(
            f'<g class="tree-node node-{kind}" tabindex="0" role="img" aria-label="{tip}"><title>{tip}</title>'
            f'<rect x="{x[j] + 1:.1f}" y="{y[j] + 1:.1f}" width="{box_w[j]:.1f}" height="{BOX_H}" rx="4" '
            f'fill="{FILL[kind]}" stroke="{LINE[kind]}" stroke-width="2"/>'
            f'<text x="{x[j] + 1 + PAD:.1f}" y="{y[j] + 1 + 17:.1f}" font-size="{TOKEN_PX}">{escape(top)}</text>'
            f'<text x="{x[j] + 1 + PAD:.1f}" y="{y[j] + 1 + 33:.1f}" font-size="{NUMBER_PX}" fill="{MUTED}">'
            f'{escape(bottom)}</text></g>')
    mine = [" (Adaptive K's choice this round)" if r.plan is not None else " (this machine's choice)" if a == 0 else ""
            for a in asked]
    sub = (f"W = {t.width}{mine[0]}: children per expanded node at most; N = {t.budget}{mine[1]}: nodes at most; "
           f"{len(nodes) - 1} drafted. Depth runs left to right, siblings top to bottom in the order they are "
           f"tested; hover or focus a node for its numbers" + ("; the thick path is kept." if decided else "."))
    legend = "".join(f'<span class="tree-key"><span class="tree-swatch" style="background:{FILL[k]};border-color:'
                     f'{LINE[k]}"></span>{escape(NAMES[k])}</span>' for k in dict.fromkeys(kinds))
    return (f'<div class="spec-tree"><p class="spec-tree-title">Round {r.index + 1}: the token tree</p>'
            f'<p class="spec-note">{escape(sub)}</p><div class="spec-tree-box">'
            f'<svg role="group" aria-label="Token tree, round {r.index + 1}" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="ui-monospace, \'DejaVu Sans Mono\', Menlo, '
            f'Consolas, monospace">{"".join(edges)}{"".join(boxes)}</svg></div>'
            f'<p class="spec-legend">{legend}</p></div>')

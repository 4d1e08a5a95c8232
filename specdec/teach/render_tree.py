"""A token-tree round as text: the rule's tests in the order it ran them, and what each phase
did to the tree and the two caches (SpecInfer, Miao et al. 2023; recursive rejection sampling,
:func:`specdec.decode.rule.verify_tree`). The chain's counterpart is :mod:`specdec.teach.render`.
"""
from __future__ import annotations

from specdec.decode.proposal import children
from specdec.decode.suffix import ALPHA
from specdec.teach.render import DASH, draft_depth, plan_text, plural, verify_cost_text
from specdec.trace import ACCEPTED, BONUS, PLAIN, REJECTED, DraftStop, RoundTrace

AGAINST, R_X, Q_RENORM, RATIO, U = "tested against", "r(x)", "q′(x)", "ratio r(x)/q′(x)", "u"
VERDICT, R_AFTER = "verdict", "r after it (top 3)"
TREE_HEADERS = ["test", "parent", "child", "q(x)", "p(x)", AGAINST, R_X, Q_RENORM, RATIO, U, VERDICT, R_AFTER]
# at temperature 0 the walk compares the child with p's argmax: no ratio is formed, no u drawn, no residual left
GREEDY_OMITS = (R_X, Q_RENORM, RATIO, U, R_AFTER)


def _walk_end(r: RoundTrace) -> int:
    """The node the walk stopped at: the last of the accepted path, else the root."""
    return r.tree.kept[-1] if r.tree.kept else 0


def _tops(top) -> str:
    return " · ".join(f"{t.text!r} {t.prob:.2f}" for t in top[:3]) or DASH


def _tested(r: RoundTrace) -> list[int]:
    """The tested nodes in the order the rule tested them: depth by depth down the accepted path,
    each node's children in index order until one is kept."""
    nodes = r.tree.nodes
    return sorted((j for j, n in enumerate(nodes) if n.status in (ACCEPTED, REJECTED)), key=lambda j: (nodes[j].depth, j))


def sibling_quotients(r: RoundTrace) -> dict[int, tuple[float, float]]:
    """What the rule divided at each tested node at temperature > 0, (r(x), q′(x)), so that ratio =
    r(x)/q′(x) (:func:`specdec.decode.rule.verify_tree`). q′ is q at the parent with the tokens of the siblings
    rejected before the node removed and renormalised: q′(x) = q(x) / (1 − their q). r is p for a first
    child; after a rejection, the residual it left, whose value at x the trace holds as ratio · q′(x)."""
    nodes, out, gone = r.tree.nodes, {}, {}
    if r.tree.copied:  # nothing drawn: q′ is one-hot at each node's own token, and the ratio is r(x) itself
        return {j: (nodes[j].ratio, 1.0) for j in _tested(r)}
    for j in _tested(r):
        n = nodes[j]
        removed = gone.get(n.parent, 0.0)
        q_renorm = n.q / (1.0 - removed) if removed else n.q
        out[j] = (n.ratio * q_renorm if removed else n.p, q_renorm)
        if n.status == REJECTED:
            gone[n.parent] = removed + n.q
    return out


def _sig(v: float) -> float:
    """Four significant digits: a small q′ keeps the digits its quotient needs to be checked by hand."""
    return float(f"{v:.4g}")


def tree_test_rows(r: RoundTrace, greedy: bool, quote=repr) -> list[tuple[str, list]]:
    """The rule's tests of a tree round in the order it ran them (:func:`_tested`), then the token
    that ended the round: (row status, cells under TREE_HEADERS). ``quote``: how a token's text is
    written (``repr``)."""
    nodes = r.tree.nodes
    tested = _tested(r)
    divided = {} if greedy else sibling_quotients(r)
    name = lambda j: f"{j}: {quote(nodes[j].text)}"  # noqa: E731
    rows, against, parent = [], "", None
    for i, j in enumerate(tested, 1):
        n = nodes[j]
        if n.parent != parent:
            parent, against = n.parent, "the argmax of p" if greedy else "p"
        kept = n.status == ACCEPTED
        verdict = (("kept: the argmax" if kept else "rejected: not the argmax") if greedy else
                   "kept (u ≤ ratio)" if kept else "rejected (u > ratio)")
        r_x, q_renorm = (_sig(v) for v in divided[j]) if j in divided else (DASH, DASH)
        rows.append((n.status, [i, name(n.parent), name(j), round(n.q, 4), round(n.p, 4), against, r_x, q_renorm,
                                round(n.ratio, 3), DASH if n.u is None else round(n.u, 3), verdict,
                                _tops(n.residual_top) if not kept else DASH]))
        if not kept and not greedy:
            against = f"the residual after {quote(n.text)}"
    if r.next_token is not None:
        end = _walk_end(r)
        if r.next_kind == PLAIN:
            source, how = "p", "drawn from p: nothing was drafted (room for one more token only)"
        elif r.next_kind == BONUS:
            source, how = "p", f"bonus: drawn from p after the leaf {quote(nodes[end].text)}"
        elif greedy:
            source, how = "the argmax of p", "resampled: no child was the argmax, so the argmax itself"
        else:
            source, how = against, "resampled: drawn from it"
        rows.append((r.next_kind, ["then", name(end), quote(r.next_token.text), DASH, DASH, source, DASH, DASH, DASH,
                                   DASH, f"{how} (probability {r.next_token.prob:.3g})", _tops(r.next_top)]))
    return rows


def _texts(r: RoundTrace, js, quote=repr) -> str:
    return ", ".join(quote(r.tree.nodes[j].text) for j in js)


def tree_explain(r: RoundTrace, phase: str, greedy: bool, k: int, confidence: float = 0.0,
                 step_fit: tuple[float, float] | None = None, quote=repr, drawn: bool = False) -> str:
    """One paragraph on what the phase just did to the round's token tree (SpecInfer; recursive
    rejection sampling, Jeon et al. 2024) and why the output keeps the verifier's distribution.
    ``step_fit``: this machine's verifier cost t_f + t_r·L in ms (:func:`~specdec.teach.render.verify_cost_text`).
    ``quote``: how a token's text is written in the sentence (``repr``; the figure marks its whitespace).
    ``drawn``: for the round's figure, where the walk is seen rather than told and each test's r/q′
    is in its node's box (the app's table otherwise)."""
    t, nodes = r.tree, r.tree.nodes
    n, depth = len(nodes) - 1, draft_depth(r)
    if n == 0 and phase != "commit":  # a plain verifier step
        why = ({DraftStop.NO_MATCH: DraftStop.NO_MATCH.text,
                DraftStop.PACED: f"Adaptive K drafted nothing: {plan_text(r.plan)}." if r.plan else ""}.get(
            r.draft_stop) or "Only one more token fits in the budget (max new tokens or the context).")
        return {"draft": f"**Draft.** Nothing was drafted. {why} The round is one plain verifier step.",
                "verify": "**Verify.** One verifier forward produced p for the next position, exactly as plain "
                          "decoding would.",
                "accept": f"**Accept/reject.** Nothing to test: {quote(r.next_token.text)} was drawn from p, as plain "
                          "decoding would."}[phase]
    if phase == "draft" and t.copied:
        shares = ", ".join(f"{quote(nodes[j].text)} {nodes[j].path_q:.0%}" for j in range(1, len(nodes))
                           if nodes[j].parent == 0)
        return (f"**Draft.** The suffix tree found the context's last {plural(r.match, 'token', 'tokens')} earlier (in "
                f"the prompt, this output or an earlier run) and proposed what followed them, with no draft forward: "
                f"a tree of the continuations, each branch as often as it followed (at the root: {shares}), at most "
                f"W = {t.width} children a node and {t.budget} nodes ({ALPHA:g} per matched token, at most the run's cap). "
                f"{plural(n, 'node', 'nodes')} in {plural(depth, 'depth', 'depths')}. Nothing was drawn, so each node's "
                "q is one-hot at its own token. Nothing is committed yet: the verifier will keep at most one path of it.")
    if phase == "draft":
        how = "q's top tokens" if greedy else "draws from q without replacement, in draw order"
        stop = DraftStop(r.draft_stop).tree_text.format(k=k, depth=depth, budget=t.budget,
                                                          threshold=f"{confidence:g}")
        paced = "" if r.plan is None else f" Adaptive K chose this shape before the round: {plan_text(r.plan)}."
        return (f"**Draft.** The draft model grew a token tree from the last context token, the root "
                f"({quote(nodes[0].text)}). Depth by depth it expanded the W = {t.width} most probable nodes (by path "
                f"probability, the product of q along the path) in one batched forward, each row seeing the context "
                f"and its own ancestors, and gave each up to W children: {how}, as many as it takes to cover most of "
                f"q (one where the draft is sure). {plural(n, 'node', 'nodes')} in {plural(depth, 'depth', 'depths')}; "
                f"{stop}.{paced} Nothing is committed yet: the verifier will keep at most one path of it.")
    if phase == "verify":
        return (f"**Verify.** One verifier forward read all {n + 1} tree rows at once, the root and the "
                f"{plural(n, 'node', 'nodes')}, under the tree attention mask below: each row sees the context and its "
                "own ancestors, never another branch, so each node's p is what a chain along its path would give. "
                f"Nothing is decided yet. {verify_cost_text(n + 1, r.times.verify, step_fit)}")
    end = _walk_end(r)
    tried = sum(nodes[j].parent == end for j in range(1, len(nodes)))
    path = f"It kept {plural(len(t.kept), 'node', 'nodes')} ({_texts(r, t.kept, quote)})" if t.kept else "It kept no node"
    at = f"at the root ({quote(nodes[0].text)})" if end == 0 else f"at {quote(nodes[end].text)}"
    kids = "its one child" if tried == 1 else f"all its {tried} children"
    if phase == "accept":
        if greedy:
            head = ("**Accept/reject.** At temperature 0 the walk is SpecInfer's VerifyGreedy: from the root it steps "
                    "to the child whose token is the verifier's argmax, as long as there is one; q and u play no "
                    "part, so the output is the verifier's greedy sequence. ")
        elif t.copied:
            head = ("**Accept/reject.** " + ("" if drawn else "The walk starts at the root. ") +
                    "A node's children are tested in order: nothing was drawn, so each child's q′ is one-hot at its "
                    "own token and child x is kept iff u ≤ r(x), r being p at first; after a rejection r loses x "
                    "(renormalised: norm(max(0, r − one-hot(x)))), so the next sibling is tested against what is left " +
                    ("(its r in the node's box). " if drawn else "(the table). A kept child is where the walk goes on. "))
        else:
            head = ("**Accept/reject.** " + ("" if drawn else "The walk starts at the root. ") +
                    "A node's children are tested in order: child x is kept iff u ≤ r(x)/q′(x), r being p and q′ "
                    "being q at first; after a rejection r becomes the residual norm(max(0, r − q′)) and q′ loses the "
                    "rejected token (renormalised), so the next sibling is tested against what is left " +
                    ("(its r/q′ in the node's box). " if drawn else "(the table). A kept child is where the walk goes on. "))
        if r.next_kind is None:
            tail = f"{path}, down to the stop token {quote(nodes[end].text)}: the output ends there."
        elif r.next_kind == BONUS:
            tail = f"{path}, down to a leaf, so the bonus {quote(r.next_token.text)} is drawn from p there at no extra cost."
        elif greedy:
            tail = (f"{path}; {at} {'its one child is not' if tried == 1 else 'none of its children is'} the "
                    f"argmax, so the argmax {quote(r.next_token.text)} itself is emitted.")
        else:
            tail = (f"{path}; {at} {kids} failed, and {quote(r.next_token.text)} is drawn from the residual "
                    f"{'it' if tried == 1 else 'they'} left. Each rejection removes from r "
                    "exactly the mass its test could have kept, so every emitted token is distributed as p, "
                    "whichever branches the draft guessed.")
        return head + tail
    cut = r.target_cache[0] - r.target_cache[1]
    return (f"**Commit and keep the path.** {plural(len(r.emitted), 'token', 'tokens')} joined the context. The verifier's "
            f"KV cache kept the rows of the root and the accepted path, moved into place after the context, and "
            f"dropped the other {plural(cut, 'row', 'rows')}, so that it holds every context token but the last. The "
            "next round starts from the new context." + (
                f" This round's shape was Adaptive K's choice: {plan_text(r.plan)}." if r.plan is not None else ""))


def tree_cache_text(r: RoundTrace, phase: str = "commit") -> str:
    """The KV-cache lengths of a tree round as far as ``phase``: the forward adds the N + 1 tree
    rows after the context's entries; keeping the path leaves the root's and the path's."""
    before, rows, kept = r.context_len - 1, len(r.tree.nodes), len(r.tree.kept)
    out = f"Verifier KV cache: {before} entries before the round (every context token but the last)"
    if phase == "draft":
        out += "; the verifier has not run yet."
    else:
        out = (f"Verifier KV cache: {before} context entries + {rows} tree rows (the root and the "
               f"{plural(rows - 1, 'node', 'nodes')}) = {r.target_cache[0]} after the forward")
        if phase != "commit":
            out += " (the path not kept yet)."
        else:
            left = r.target_cache[1] - before
            which = ("the root alone: no node was kept" if left == 1 and kept == 0 else
                     f"the root and the accepted path's {plural(kept, 'node', 'nodes')}" if left == kept + 1 else
                     "the root and the accepted path but its last node, now the newest context token")
            out += (f" → {before} + {left} = {r.target_cache[1]} after keeping the path ({which}); "
                    f"{r.target_cache[0] - r.target_cache[1]} dropped.")
    if r.draft_cache is not None:
        grew = r.draft_cache[0] - r.context_len
        out += (f" Draft KV cache: {r.draft_cache[0]} after drafting (the {r.context_len} context tokens and the "
                f"{plural(grew, 'node', 'nodes')} it expanded)")
        out += (f", {r.draft_cache[1]} after keeping the path's nodes it had run (it catches up on the rest in its "
                "next forward)." if phase == "commit" else ".")
    return out


def tree_layout(r: RoundTrace, phase: str) -> tuple[list[int], list[int], list[float]]:
    """The boxes a drawing of a tree round has as far as ``phase``: each one's parent, depth and row (0 at
    the top, siblings in test order). Once the verdicts are revealed the token that ends the round is one
    more box, a child of the node the walk stopped at."""
    nodes = r.tree.nodes
    parents = [n.parent for n in nodes]
    if phase in ("accept", "commit") and r.next_token is not None:
        parents.append(_walk_end(r))
    depth = [0] + [n.depth for n in nodes[1:]] + ([nodes[parents[-1]].depth + 1] if len(parents) > len(nodes) else [])
    return parents, depth, [-v for v in slots(parents)]


def slots(parents) -> list[float]:
    """Each node's row, siblings stacked in test order from the top: a leaf takes the next row,
    a parent sits halfway between its first and its last child."""
    kids = children(parents)
    y, leaves = [0.0] * len(parents), 0

    def place(j: int) -> None:
        nonlocal leaves
        if not kids[j]:
            y[j], leaves = -leaves, leaves + 1
            return
        for c in kids[j]:
            place(c)
        y[j] = (y[kids[j][0]] + y[kids[j][-1]]) / 2
    place(0)
    return y

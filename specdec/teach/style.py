"""The one style of every picture of a round: its colours, and the marks that make whitespace visible.

The slide figure (:mod:`specdec.teach.figure`), the app's tree view and charts, and the app's CSS
(through the custom properties the page writes from these values, ``specdec_ui/page.py``) all read
them here, so a kind of token looks the same wherever it is drawn. Colour is never the only cue:
each reader adds a second one of its own (a symbol and a word in the figure, an underline style or a
marker in the text).
"""
from __future__ import annotations

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
)

DRAFTED = "drafted"  # a draft, a chain's position or a tree's node, before the verdicts are revealed

INK, MUTED = "#111827", "#374151"  # text on the white page or slide, and its quieter second voice
# Each kind of token: a light fill that the ink reads on (the coloured text, the tree's boxes, the figure's
# rows), and a darker line of the same hue for its border, underline or edge.
FILL = {ACCEPTED: "#86efac", REJECTED: "#fca5a5", RESAMPLED: "#fcd34d", BONUS: "#93c5fd", PLAIN: "#e5e7eb",
        DRAFTED: "#dbeafe", UNREACHED: "#f3f4f6", AFTER_STOP: "#f3f4f6", UNTESTED: "#f3f4f6", ROOT: "#ffffff"}
LINE = {ACCEPTED: "#15803d", REJECTED: "#b91c1c", RESAMPLED: "#92400e", BONUS: "#1e40af", PLAIN: "#4b5563",
        DRAFTED: "#2563eb", UNREACHED: "#6b7280", AFTER_STOP: "#6b7280", UNTESTED: "#6b7280", ROOT: "#111827"}
EDGE_COLOR = "#9ca3af"  # a tree's edge off the kept path
# Saturated, for a bar or a stripe on white: the charts' verdicts and the tables' row edges.
BAR = {ACCEPTED: "#16a34a", REJECTED: "#dc2626", UNREACHED: "#9ca3af", RESAMPLED: "#d97706", BONUS: "#2563eb"}
P_COLOR, Q_COLOR, RESIDUAL_COLOR = "#ea580c", "#2563eb", "#a16207"  # the verifier's p, the draft's q, the residual
# A round's phases, as :class:`specdec.trace.PhaseTimes` names them.
PHASE_COLORS = {"draft": "#60a5fa", "verify": "#f97316", "accept": "#a855f7", "rollback": "#10b981", "other": "#9ca3af"}
# The runs a comparison races: verifier only, a drafter's chain, a token tree.
BASELINE_COLOR, CHAIN_COLOR, TREE_COLOR = "#6b7280", "#2563eb", "#7c3aed"
# Whitespace made visible: the app's "show whitespace" switch, a token on a chart's axis, the figure's tokens.
MARKS = {" ": "·", "\t": "→", "\n": "↵"}

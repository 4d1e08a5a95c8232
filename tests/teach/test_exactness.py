"""A greedy difference from verifier-only is explained, never silent: a near-tie, or a bug."""
from __future__ import annotations

import pytest
import torch
from helpers import tiny

from specdec.decode.engine import Generation
from specdec.decode.settings import ModelChoice, RunSettings
from specdec.model.lm import CachedLM
from specdec.options import DecodeConfig, SamplingConfig
from specdec.teach.exactness import TIE_ROUNDINGS, UNIT_ROUNDOFF, explain

pytestmark = pytest.mark.usefixtures("one_thread")
GREEDY = DecodeConfig(max_new_tokens=12, k=4, confidence=0.0, sampling=SamplingConfig(0.0))


def runs(pair, prompt):
    base = Generation(pair, prompt, GREEDY, _drafter(pair, "none")).run()
    spec = Generation(pair, prompt, GREEDY, _drafter(pair, "model")).run()
    return base, spec


def _drafter(pair, kind):
    from specdec.decode.start import make_drafter
    return make_drafter(kind, pair)


def top2(pair, context):
    lm = CachedLM(pair.target, pair.vocab_size)
    lm.prefill(context[:-1])
    return lm.forward(context[-1:], keep=1)[0].topk(2)


def test_equal_outputs_need_no_explanation():
    pair = tiny.pair(tiny.lean(tiny.model(4, scale=8)), tiny.lean(tiny.model(5, scale=8)))
    base, spec = runs(pair, tiny.prompt_ids())
    assert base.token_ids == spec.token_ids and explain(pair, base.prompt_ids, base.token_ids, spec.token_ids) is None


def test_a_difference_away_from_a_tie_is_called_a_bug_with_the_measured_gap():
    pair = tiny.pair(tiny.lean(tiny.model(4, scale=8)), tiny.lean(tiny.model(5, scale=8)))
    prompt = tiny.prompt_ids()
    base, _ = runs(pair, prompt)
    other = list(base.token_ids)
    other[5] = (other[5] + 1) % (tiny.V - 1)  # as if the speculative run had parted there
    d = explain(pair, prompt, base.token_ids, other)
    values = top2(pair, prompt + base.token_ids[:5]).values
    assert (d.index, d.baseline, d.speculative) == (5, base.token_ids[5], other[5])
    assert d.gap == pytest.approx(float(values[0] - values[1]))
    assert d.tolerance == pytest.approx(TIE_ROUNDINGS * UNIT_ROUNDOFF["float32"] * max(abs(float(values[0])), 1))
    assert not d.near_tie and "not a near-tie" in d.sentence() and "token 6" in d.sentence()
    shorter = explain(pair, prompt, base.token_ids[:3], base.token_ids)
    assert shorter.baseline is None and "verifier only the end" in shorter.sentence()


def test_a_difference_at_an_exact_tie_is_a_near_tie():
    target = tiny.model(4, scale=8)
    prompt = tiny.prompt_ids()
    first = int(tiny.lean(target)(torch.tensor(prompt), tiny.lean(target).new_cache(), 1)[0, : tiny.V].argmax())
    twin = (first + 1) % (tiny.V - 1)
    with torch.no_grad():
        target.lm_head.weight[twin] = target.lm_head.weight[first]  # two tokens with the very same logit
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.model(5, scale=8)))
    d = explain(pair, prompt, [first], [twin])
    assert d.gap == 0 and d.near_tie and "a near-tie" in d.sentence() and d.to_dict()["near_tie"]


def test_the_compare_view_says_where_and_why_outputs_part():
    from specdec_ui.tabs.compare import compare_view
    pair = tiny.pair(tiny.lean(tiny.model(4, scale=8)), tiny.lean(tiny.model(5, scale=8)))
    prompt = tiny.prompt_ids()
    base, spec = runs(pair, prompt)
    spec.token_ids[5] = (spec.token_ids[5] + 1) % (tiny.V - 1)
    d = explain(pair, prompt, base.token_ids, spec.token_ids)
    settings = RunSettings("w1 w2", "model", GREEDY, ModelChoice.of(pair))
    view = compare_view([{"verifier only": base, "speculative": spec}], settings, True, differences={"speculative": d})
    assert 'class="cmp-verdict cmp-differ" role="status"' in view.verdict and "Outputs differ from token 6" in view.verdict
    assert "The outputs part at token 6" in view.verdict and "apart, beyond float32's rounding tolerance" in view.verdict
    assert 'class="al-col al-first" data-n="6"' in view.aligned                 # the aligned outputs mark it too


def test_each_configuration_says_how_exact_it_is():
    from specdec.model.precision import Precision
    from specdec.teach.exactness import how_exact
    m = tiny.model(4, scale=8)
    int8 = tiny.pair(tiny.lean(m, "int8"))
    int8.precision = Precision("int8", "")
    assert how_exact(int8).startswith("bit for bit: batch-invariant int8")
    assert how_exact(tiny.pair(tiny.lean(m))).startswith("up to rounding: float32")
    assert "padded to 8 rows" in how_exact(tiny.pair(tiny.lean(m, static=True, pad_rows=8)))
    assert how_exact(tiny.pair(m)).startswith("transformers' forward")

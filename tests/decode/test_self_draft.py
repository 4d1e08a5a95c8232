"""The self-drafter (specdec.decode.self_draft): the verifier with layers skipped, lossless like any draft."""
import pytest
import torch
from helpers import tiny

from specdec import DecodeConfig, Generation, SamplingConfig, make_drafter
from specdec.decode import self_draft
from specdec.decode.self_draft import calibrate_skip, choose_skip, expected_rate, skip_view
from specdec.options import ConfigError
from specdec.teach.experiment import tv_distance as tv
from specdec.teach.experiment import tv_noise_bound as noise_bound

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # the skip choice is cached there, per test
    target = tiny.model(1, scale=6)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))
    pair.stop_ids = frozenset()
    pair.reference = target
    return pair


def _logits(model, ids):
    with torch.inference_mode():
        return model(torch.tensor(ids), model.new_cache(32), len(ids))


def test_a_view_shares_the_weights_runs_only_its_layers_and_leaves_the_verifier_whole(pair):
    model, ids = pair.target, tiny.prompt_ids(7)
    layers = list(model.layers)
    whole = skip_view(model, tuple(range(len(layers))))
    assert torch.equal(_logits(whole, ids), _logits(model, ids))      # every layer kept: the verifier itself
    short = skip_view(model, (0,))
    assert short.layers[0] is layers[0] and len(short.layers) == 1 and short.head is model.head
    assert list(model.layers) == layers and model.shape.layers == len(layers)  # the verifier untouched
    assert len(short.new_cache().k) == 1                                       # its cache: its layers only
    assert not torch.equal(_logits(short, ids), _logits(model, ids))
    with pytest.raises(ValueError, match="ascending layer indices"):
        skip_view(model, (1, 0))


def test_the_calibration_keeps_the_first_layer_and_is_cached(pair, monkeypatch):
    choice = choose_skip(pair)
    assert 0 not in choice.skip and choice.keep[0] == 0 and choice.layers == len(pair.target.layers)
    assert set(choice.alone) == set(range(1, choice.layers)) and set(choice.agreement) <= set(range(1, choice.layers))
    monkeypatch.setattr(self_draft, "calibrate_skip", lambda *a: pytest.fail("measured again, not read"))
    assert choose_skip(pair).skip == choice.skip


def test_the_set_with_the_most_tokens_per_cost_is_kept():
    # a cheaper draft that agrees less can still pay more: rate = E(a, K) / (K c + 1)
    assert expected_rate(0.9, 4, 0.75) < expected_rate(0.85, 4, 0.5)
    assert expected_rate(1.0, 4, 0.5) == pytest.approx(5 / 3)
    ids = tiny.prompt_ids(9)
    target = tiny.lean(tiny.model(1, scale=6))
    choice = calibrate_skip(target, ids, tiny.V)
    assert choice.skip and all(0 < i < len(target.layers) for i in choice.skip)


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_output_is_the_verifiers(pair, k):
    for seed in (3, 4):
        cfg = DecodeConfig(max_new_tokens=24, k=k, confidence=0.0, sampling=SamplingConfig(0.0))
        prompt = tiny.prompt_ids(seed)
        base = Generation(pair, prompt, cfg, make_drafter("none", pair)).run()
        gen = Generation(pair, prompt, cfg, make_drafter("self", pair)).run()
        assert gen.token_ids == base.token_ids and gen.summary().drafted > 0


def test_the_self_drafter_emits_the_verifier_distribution(pair):
    sampling = SamplingConfig(0.8, top_k=20, top_p=0.95)
    prompt, n, runs = tiny.prompt_ids(5), 3, 600
    exact = tiny.exact_marginals(pair.reference, prompt, sampling, n)
    counts, accepted = torch.zeros(n, tiny.V), 0
    for seed in range(runs):
        cfg = DecodeConfig(max_new_tokens=n, k=2, confidence=0.0, seed=seed, sampling=sampling)
        gen = Generation(pair, prompt, cfg, make_drafter("self", pair)).run()
        accepted += gen.summary().accepted
        for i, tok in enumerate(gen.token_ids):
            counts[i, tok] += 1
    assert accepted > runs / 2
    for i in range(n):
        assert tv(counts[i] / runs, exact[i]) <= noise_bound(exact[i], runs), f"token {i}"


def test_a_verifier_without_the_lean_forward_is_refused_at_the_drafter_field():
    pair = tiny.pair(tiny.model(1), tiny.model(2))
    with pytest.raises(ConfigError, match="drafter 'self' needs the lean Qwen2 forward") as e:
        make_drafter("self", pair)
    assert e.value.field == "drafter"

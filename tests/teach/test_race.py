"""The drafters' race (specdec.teach.race) and ``python -m specdec race`` on the tiny pair."""
import json

import pytest
from helpers import tiny

from specdec import DecodeConfig, SamplingConfig
from specdec.decode.suffix import session_pool
from specdec.options import ConfigError
from specdec.teach.race import RACERS, VERIFIER, race

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "w1 w2 w3 w4 w1 w2 w3 w4 w1 w2"  # repeats: the copying drafters find matches


@pytest.fixture
def pair():
    target = tiny.model(1, scale=6)
    pair = tiny.pair(tiny.lean(target), tiny.lean(tiny.noisy_copy(target, 2, 0.5), batch_invariant=False))
    session_pool(pair.target_name).clear()
    yield pair
    session_pool(pair.target_name).clear()


def test_every_drafter_races_and_is_identical_to_verifier_only_at_t0(pair):
    result = race(pair, PROMPT, DecodeConfig(max_new_tokens=16, k=3, confidence=0.0), chat=False)
    assert [r.drafter for r in result.rows] == list(RACERS)
    base = result.rows[0]
    assert base.speedup == 1.0 and base.tokens_per_round == 1.0 and base.acceptance is None and base.c is None
    for row in result.rows:
        assert row.identical is True and row.text == base.text, row.drafter
        assert sum(row.kept_by.values()) == row.tokens == len(row.pieces)
        assert "".join(p for p, _ in row.pieces) == row.text
        # a kept draft is the proposer's, every other token the verifier's: one verifier token per round
        assert row.kept_by.get(VERIFIER, 0) <= row.rounds
        assert row.speedup == pytest.approx(row.decode_tok_s / base.decode_tok_s)
    copied = {r.drafter: r for r in result.rows}
    assert set(copied["suffix"].kept_by) <= {"suffix", VERIFIER}
    assert copied["lookup"].c is not None and copied["model"].c is not None  # shown, never compared: c reads a clock
    table = result.table()
    assert all(r.label in table for r in result.rows)


def test_racers_do_not_read_each_other_and_a_second_race_reads_the_first(pair):
    cfg = DecodeConfig(max_new_tokens=16, k=3, confidence=0.0)
    pool = session_pool(pair.target_name)
    first = race(pair, PROMPT, cfg, ("suffix",), chat=False)
    assert len(pool.documents) == 1  # the race joined the pool once, as the verifier-only run
    again = race(pair, PROMPT, cfg, ("suffix",), chat=False)
    kept = lambda r: r.rows[1].kept_by.get("suffix", 0)  # noqa: E731
    assert kept(again) > kept(first) and again.rows[1].acceptance == 1.0  # the same task's output, copied
    assert len(pool.documents) == 2


def test_sampling_claims_nothing_about_identical_output(pair):
    result = race(pair, PROMPT, DecodeConfig(max_new_tokens=8, k=2, confidence=0.0, sampling=SamplingConfig(0.8)),
                  ("model", "suffix"), chat=False)
    assert [r.identical for r in result.rows] == [None] * 3


def test_a_drafter_needing_the_model_is_skipped_without_one_and_a_bad_name_is_refused(pair):
    pair.draft = None
    result = race(pair, PROMPT, DecodeConfig(max_new_tokens=4, k=2), ("model", "lookup"), chat=False)
    assert [r.drafter for r in result.rows] == ["none", "lookup"] and "model: needs a draft model" in result.skipped[0]
    with pytest.raises(ConfigError, match="drafters must be among"):
        race(pair, PROMPT, DecodeConfig(), ("oracle",), chat=False)


def test_the_command_line_race_prints_one_json_object(pair, monkeypatch, capsys):
    import specdec.weights.loading
    from specdec.cli import main
    monkeypatch.setattr(specdec.weights.loading, "load_pair", lambda *a, **kw: pair)
    capsys.readouterr()
    assert main(["race", "--prompt", PROMPT, "--no-chat-template", "--k", "2", "--max-new-tokens", "6",
                 "--drafters", "lookup,suffix", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["drafter"] for r in out["rows"]] == ["none", "lookup", "suffix"]
    assert all(r["identical"] for r in out["rows"])
    assert main(["race", "--prompt", PROMPT, "--drafters", "lookup,oracle"]) == 2
    err = capsys.readouterr().err
    assert "error: drafters must be a comma-separated list" in err and "Traceback" not in err

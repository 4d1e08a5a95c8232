"""The Run tab's summary states the count definitions (tests/teach/test_theory.py) in its words, on
the same scripted run."""
from __future__ import annotations

from helpers.scripted import count_definitions_run

from specdec.trace import summarize
from specdec_ui.tabs.run import summary_markdown


def test_the_summary_says_the_count_definitions():
    gen = count_definitions_run()
    text = summary_markdown(summarize(gen.rounds, gen.prefill_s), gen.rounds)
    assert "drafts kept / tested = 8 / 9" in text and "kept / drafted" not in text  # one acceptance number: a
    assert "**3 rounds**, **4 verifier passes**" in text and "10 tokens / 3 rounds" in text
    assert "**3.33 drafted per round**" in text
    assert ("10 = 8 drafts kept + 2 drawn by the verifier (the resampled or bonus token: one per round, none in the "
            "1 round that ended at a stop token among the kept drafts)") in text

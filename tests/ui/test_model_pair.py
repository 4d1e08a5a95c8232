"""The model pair picked in the page (the header's model form): its values are read and checked as
the command line's flags are, by the same loading code, and a refused value is answered at its
field with the command line's message; a pair that loads replaces the one in use, whose memory
goes, and every session's step-through restarts on the new pair; a pair that fails leaves the one
in use before it loaded and working. On tiny GGUF files (``tiny_gguf``), loaded the way a teacher's
.gguf path is, offline and in seconds; the CPU's precision measurement is replaced by float32."""
from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from helpers import tiny_gguf

from specdec import ModelChoice, cli
from specdec.model import precision
from specdec.model.precision import Precision
from specdec.options import flat
from specdec.weights import loading
from specdec_ui import page
from specdec_ui.state import (
    FIELD_LABELS,
    MODEL_FORM,
    SWITCHED,
    Loader,
    Session,
    form_defaults,
    model_values,
)
from specdec_ui.tabs import step as step_tab
from specdec_ui.tabs.step import StepView
from specdec_ui.views import Problem

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "the cat sat in the hat"
FLOAT32 = Precision("float32", "test")


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> tuple[str, str]:
    """Two tiny models of one family (one tokenizer, different weights): a verifier and its draft."""
    where = tmp_path_factory.mktemp("pair")
    for name, seed in (("verifier", 0), ("draft", 1)):
        (where / name).mkdir()
        tiny_gguf.write_gguf(where / name / "model.gguf", seed)
    return str(where / "verifier" / "model.gguf"), str(where / "draft" / "model.gguf")


def unmeasured(field: str):
    def choose(device, requested, *config):
        precision._check_name(device, requested, field)  # the name checked as ever
        return FLOAT32
    return choose


@pytest.fixture(autouse=True)
def no_measurement(monkeypatch):
    """float32 without timing this CPU's kernels (minutes on a first run); the pairs loaded here
    are forgotten afterwards, as the app forgets a pair it switches away from."""
    monkeypatch.setattr(loading, "choose", unmeasured("precision"))
    monkeypatch.setattr(loading, "choose_draft", unmeasured("draft_precision"))
    before = set(loading._PAIRS)
    yield
    for key in set(loading._PAIRS) - before:
        del loading._PAIRS[key]


def choice(target: str, draft: str | None) -> ModelChoice:
    return ModelChoice(target, draft, "cpu", "float32", "float32")


def values(models: ModelChoice, **changed) -> dict:
    """The header's model form as the page sends it: a radio's value, or a text box's text."""
    return {**model_values(models), **changed}


def loaded(ggufs) -> Loader:
    loader = Loader(choice(*ggufs)).load_in_background().wait()
    assert loader.pair is not None, loader.error
    return loader


def form(**kw) -> dict:
    return {**form_defaults(), "prompt": PROMPT, "k": 3, "confidence": 0.0, "max_new_tokens": 12, **kw}


def step(loader, session, action="step"):
    return list(step_tab.step(loader, action, session, form()))[-1]


def cli_error(capsys, models: ModelChoice) -> str:
    """The command line's one-line message for the same choice, without its "error: "."""
    flags = [f"--{name.replace('_', '-')}={'' if value is None else value}" for name, value in flat(models).items()]
    assert cli.main(["generate", "--prompt", PROMPT, *flags]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    # after "error: ": a loading progress bar (ended by \r, not a newline) may share its line
    return line[line.rindex("error: ") + len("error: "):] if "error: " in line else line


def in_the_page(field: str, message: str) -> str:
    """A message in the page's words: the field's label in place of its code name (views.field_message)."""
    return FIELD_LABELS[field] + message.removeprefix(field) + "."


@pytest.mark.parametrize("field, bad", [("target", "/no/such/model.gguf"), ("draft", "no-such-user/no-such-model"),
                                        ("device", "cuda"), ("precision", "float64")])
def test_a_refused_value_is_answered_at_its_field_with_the_command_lines_message(ggufs, capsys, field, bad):
    loader = loaded(ggufs)
    asked = values(loader.models, **{field: bad})
    *started, problem = list(page.load_models(loader, asked))
    wanted = cli_error(capsys, ModelChoice(**{**flat(loader.models), field: bad}))
    assert isinstance(problem, Problem) and problem.field == field
    assert problem.message == in_the_page(field, wanted)
    # a model name that names nothing is refused before the pair in use is released (no status line); the
    # rest once the new pair's loading has tried them
    assert [isinstance(x, str) for x in started] == ([] if field in ("target", "draft") else [True])


def test_a_draft_of_another_family_is_refused_at_the_draft_field(ggufs, tmp_path, capsys):
    """A local directory holding a model whose tokenizer spells other tokens (the word-level tiny model)."""
    from helpers import tiny
    other = tmp_path / "other"
    tiny.model(3).save_pretrained(other)
    tiny.tokenizer().save_pretrained(other)
    loader = loaded(ggufs)
    *_, problem = list(page.load_models(loader, values(loader.models, draft=str(other))))
    wanted = cli_error(capsys, choice(ggufs[0], str(other)))
    assert wanted.startswith("draft and target tokenizers disagree at id 0")
    assert problem.field == "draft" and problem.message == in_the_page("draft", wanted)


def test_the_pair_in_use_stays_usable_when_the_new_one_fails(ggufs):
    loader = loaded(ggufs)
    session = Session()
    assert isinstance(step(loader, session), StepView)
    in_use = loader.pair
    *_, problem = list(page.load_models(loader, values(loader.models, target="/no/such/dir")))
    assert problem.field == "target"
    loader.wait()
    # a name that names nothing is refused before anything is released: the same pair, the same step-through
    assert loader.pair is in_use and loader.error is None and loader.models == choice(*ggufs)
    again = step(loader, session)
    assert isinstance(again, StepView) and again.status.startswith("Round 2:")
    # a directory that exists but holds no model is refused by the loading itself: the pair in use comes back
    empty = Path(ggufs[0]).parent.parent / "empty"
    empty.mkdir(exist_ok=True)
    *_, problem = list(page.load_models(loader, values(loader.models, target=str(empty))))
    assert problem.field == "target"
    loader.wait()
    assert loader.pair is not None and loader.error is None and loader.models == choice(*ggufs)
    assert (loader.pair.target_name, loader.pair.draft_name) == ggufs
    again = step(loader, session)  # on the pair loaded again: the step-through restarts and says so
    assert isinstance(again, StepView) and "restarted from the prompt (2 rounds on show discarded)" in again.status
    assert isinstance(step(loader, session), StepView)


def test_a_new_pair_replaces_the_old_one_whose_memory_goes_and_the_step_through_restarts(ggufs):
    loader = loaded(ggufs)
    session, running = Session(), Session()
    assert isinstance(step(loader, session), StepView) and isinstance(step(loader, session), StepView)
    old = weakref.ref(loader.pair)
    swapped = values(loader.models, target=ggufs[1], draft=ggufs[0])
    *said, last = list(page.load_models(loader, swapped))
    assert said[0].startswith(f"Loading {ggufs[1]} with {ggufs[0]}") and last == ""
    assert (loader.pair.target_name, loader.pair.draft_name) == (ggufs[1], ggufs[0])
    assert loader.models == choice(ggufs[1], ggufs[0]) and loader.refused is None
    assert session.gen is SWITCHED and running.gen is None  # let go of; a session that never ran has nothing
    gc.collect()
    assert old() is None  # no session, memo or thread holds the old pair any more
    view = step(loader, session)
    assert view.status.startswith("Verifier, Draft changed: the step-through restarted from the prompt "
                                  "(2 rounds on show discarded).")
    assert session.gen.pair is loader.pair


def test_the_same_models_are_not_loaded_again_and_back_to_embedded_names_the_default_pair(ggufs):
    loader = loaded(ggufs)
    pair = loader.pair
    assert list(page.load_models(loader, values(loader.models))) == [Problem(page.SAME_MODELS)]
    assert loader.pair is pair
    assert list(model_values(ModelChoice()).values())[:2] == [ModelChoice.target, ModelChoice.draft]
    assert tuple(model_values(ModelChoice())) == MODEL_FORM


def test_an_empty_draft_is_none_as_on_the_command_line(ggufs):
    loader = loaded(ggufs)
    *_, last = list(page.load_models(loader, values(loader.models, draft="  ")))
    assert last == "" and loader.pair.draft is None and loader.models.draft is None
    problem = step(loader, Session())
    assert problem.field == "drafter" and "needs a draft model" in problem.message

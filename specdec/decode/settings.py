"""The one settings record of a run, and the command-line options that fill it.

:class:`RunSettings` is what a trace file records and what every entry point (CLI, app,
benchmarks) writes: the prompt, who drafts, the models and where they run, and the decoding
configuration. Every field of it and of the records it holds is an option declared once
(:mod:`.options`); ``add_run_arguments`` and ``add_model_arguments`` build the matching argparse
options for the CLI, the app and the benchmarks from them.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from specdec.decode.registry import DRAFTERS, MODEL, needs_draft
from specdec.model.devices import DEVICES
from specdec.model.precision import PRECISIONS
from specdec.options import (
    DecodeConfig,
    add_arguments,
    build,
    check,
    flat,
    option,
    validate_prompt,
)
from specdec.weights.catalogue import DEFAULT_DRAFT, DEFAULT_TARGET


@dataclass(frozen=True)
class ModelChoice:
    """Which models, on which device, in which precision. ``draft`` None: no draft model. The
    library checks these names where it loads the models, and its error names the field."""

    target: str = option("verifier model", default=DEFAULT_TARGET)
    draft: str | None = option("draft model (empty: none)", default=DEFAULT_DRAFT)
    device: str = option(f"{', '.join(DEVICES)}; auto: MPS, then CUDA, then CPU", default="auto")
    precision: str = option(f"the verifier's: {', '.join(PRECISIONS)}; auto: chosen by measurement on this machine",
                            default="auto")
    draft_precision: str = option(f"the draft's: {', '.join(PRECISIONS)}; auto: measured on the draft's own shapes, "
                                  "at one row", default="auto")

    @classmethod
    def of(cls, pair) -> ModelChoice:
        """What a loaded pair actually is: the resolved device and precisions, not "auto"."""
        return cls(pair.target_name, pair.draft_name, str(pair.device), pair.precision.name,
                   pair.draft_precision.name if pair.draft_precision else "auto")

    def load(self, progress=None, drafter: str = MODEL.name):
        from specdec.weights.loading import load_pair
        return load_pair(self.target, self.draft if needs_draft(drafter) else None, self.device, self.precision,
                         progress=progress, draft_precision=self.draft_precision)


@dataclass(frozen=True)
class RunSettings:
    prompt: str = option("the user prompt", label="Prompt")  # checked by validate_prompt: no echo of a long text
    drafter: str = option(
        "; ".join([f"who drafts: {', '.join(DRAFTERS)}"] + [f"{d.name}: {d.help}" for d in DRAFTERS.values() if d.help]),
        default=MODEL.name, allowed=f"one of {', '.join(DRAFTERS)}", valid=DRAFTERS.__contains__, label="Drafter",
        app_choices={d.name: d.label for d in DRAFTERS.values() if d.in_app})
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    models: ModelChoice = field(default_factory=ModelChoice)
    chat_template: bool = option("wrap the prompt in the verifier's chat template", default=True,
                                 allowed="True or False", valid=lambda v: isinstance(v, bool))

    def __post_init__(self):
        validate_prompt(self.prompt)
        check(self)

    def to_dict(self) -> dict:
        """Flat and JSON-ready: the ``settings`` object of a trace file."""
        d = flat(self)
        if not needs_draft(self.drafter):  # no draft model ran: the record names none
            d.update(draft=None, draft_precision=None)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunSettings:
        """Inverse of ``to_dict``; a missing entry takes its default. Raises ConfigError."""
        return build(cls, {**d, "draft_precision": d.get("draft_precision") or ModelChoice.draft_precision})


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, ModelChoice)


def models_from_args(args: argparse.Namespace) -> ModelChoice:
    return build(ModelChoice, vars(args))


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, RunSettings)


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    return build(RunSettings, vars(args))

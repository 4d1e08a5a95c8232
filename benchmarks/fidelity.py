"""Fidelity of each CPU representation against the float32 dequantized verifier (transformers'
own forward): top-1 agreement and mean KL(p_float32 || p_representation) over a fixed text of
2,048 tokens (the start of this Python's ``textwrap.py``: code and prose), teacher-forced."""
from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from specdec.cache import CachedLM
from specdec.embedded import EMBEDDED, cache_root
from specdec.models import load_model
from specdec.precision import choose

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


def fidelity(pair, precisions: list[str]) -> dict:
    text, source = fixed_text()
    ids = pair.tokenizer(text)["input_ids"][:TOKENS]
    spec = EMBEDDED[pair.target_name]
    reference = AutoModelForCausalLM.from_pretrained(
        str(cache_root() / spec.sha256[:16] / "converted-float32"), dtype=torch.float32).eval()
    ref = logprobs(reference, ids, pair.vocab_size)
    del reference
    out = {"text": source, "text_sha256": hashlib.sha256(text.encode()).hexdigest(), "tokens": len(ids),
           "reference": "float32 dequantized GGUF verifier, transformers' forward", "precisions": {}}
    for name in precisions:
        model, _ = load_model(pair.target_name, torch.device("cpu"), choose(torch.device("cpu"), name), "target")
        lp = logprobs(model, ids, pair.vocab_size)
        out["precisions"][name] = {
            "top1_agreement": float((lp.argmax(-1) == ref.argmax(-1)).float().mean()),
            "mean_kl": float((ref.exp() * (ref - lp)).sum(-1).mean()),
        }
        del model
    return out

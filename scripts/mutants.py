"""Plant one known bug at a time and check that the fast tests catch it (``make mutants``).

    python scripts/mutants.py            # every mutant, one after the other (~10-20 min on 2 cores)
    python scripts/mutants.py --list     # what is planted where
    python scripts/mutants.py --only residual-unnormalised stop-last-token-only

Each mutant is a literal edit of one source file in a scratch copy of the repository; the fast
tier (``pytest -m "not real and not browser" -x``) then runs against that copy, with specdec's C++
kernels built in it (once for the unmutated copy, again for each mutant of their source). A mutant is
*killed* when some test fails, and *survives* when all pass: a survivor is a bug class the tests
cannot see. Exit status 1 if any survives. The bug classes are those an independent mutation run
found slipping through, plus the classic mistakes of speculative decoding implementations.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # NEEDS' checks import specdec from this tree


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    why: str
    needs: str = ""  # a capability the tests that kill it need (NEEDS): elsewhere the mutant is not run


def _has_vnni_kernels() -> bool:
    from specdec.model import native
    return native.available() and any(native.ISA_NAMES[i] in ("AVX-VNNI", "AVX512-VNNI") for i in native.isas())


def _has_onednn_int8() -> bool:
    from specdec.model.precision import cpu_capabilities
    return bool(cpu_capabilities()["onednn_int8"])


# What a machine must have for a mutant's killing tests to run (they skip elsewhere, so the mutant would
# "survive" for want of a test, not for a gap in them).
NEEDS = {"vnni": _has_vnni_kernels, "onednn-int8": _has_onednn_int8}


MUTANTS = [
    Mutant("residual-unnormalised", "specdec/decode/rule.py",
           "residual / mass.clamp_min(1e-30)", "residual",
           "the resample distribution is max(0, p - q) without dividing by its mass"),
    Mutant("residual-wrong-position", "specdec/decode/rule.py",
           "p_next = target_probs[rows, n_accepted]", "p_next = target_probs[rows, (n_accepted + 1).clamp_max(K)]",
           "the resample or bonus comes from the next position's p"),
    Mutant("ratio-inverted", "specdec/decode/rule.py",
           "ratios = p_x / q_x", "ratios = q_x / p_x.clamp_min(1e-30)",
           "q/p instead of p/q (the letters of Chen et al. read as Leviathan's)"),
    Mutant("one-draw-for-all-positions", "specdec/decode/rule.py",
           "uniforms = 1.0 - torch.rand((B, K), generator=generator, device=ratios.device)",
           "uniforms = (1.0 - torch.rand((B, 1), generator=generator, device=ratios.device)).expand(B, K)",
           "one uniform u shared by every drafted position of a round"),
    Mutant("bonus-skipped", "specdec/decode/engine.py",
           "new = self._emit([proposal.tokens[j] for j in path] + [nxt], context)",
           "new = self._emit([proposal.tokens[j] for j in path] + ([nxt] if len(path) < proposal.n else []), context)",
           "no bonus token when every draft is kept"),
    Mutant("stop-last-token-only", "specdec/decode/engine.py",
           "        stop_at = next((i for i, tok in enumerate(new) if tok in self.stop_ids), None)",
           "        stop_at = len(new) - 1 if new[-1] in self.stop_ids else None",
           "a stop token is looked for only at the end of the round's new tokens"),
    Mutant("rng-reseeded-each-round", "specdec/decode/engine.py",
           "        t0 = clock()\n", "        t0 = clock()\n        generator.manual_seed(cfg.seed)\n",
           "the generator is re-seeded every round, so rounds repeat their draws"),
    Mutant("p-not-warped", "specdec/decode/engine.py",
           "target_probs = probs_from_logits(logits, s, check=False)                  # (N+1, V)",
           "target_probs = probs_from_logits(logits, type(s)(1.0) if s.temperature else s, check=False)",
           "the verifier's p ignores temperature, top-k and top-p while q uses them"),
    Mutant("q-reported-unwarped", "specdec/decode/drafters.py",
           "            dists.append(q)\n", "            dists.append(torch.softmax(logits.float(), -1))\n",
           "the draft samples from warped q but reports the raw softmax (the argmax/softmax mismatch family)"),
    Mutant("lookup-q-not-one-hot", "specdec/decode/drafters.py",
           "        probs = one_hot(to_device(copied, self.device), self.vocab_size)    # (K+1, V) a leaf last\n",
           "        probs = one_hot(to_device(copied, self.device), self.vocab_size)\n"
           "        probs[:-1] = 0.9 * probs[:-1] + 0.1 / self.vocab_size\n",
           "prompt lookup reports a smoothed q instead of the one-hot it drafts from"),
    Mutant("rollback-one-too-far", "specdec/model/lm.py",
           "excess = len(self) - (len(context) - 1)", "excess = len(self) - (len(context) - 2)",
           "the cache is cropped one entry more than the invariant says"),
    Mutant("padding-rows-sampled", "specdec/weights/pairing.py",
           "self.vocab_size = min([len(self.tokenizer)] + [", "self.vocab_size = min([10**9] + [",
           "p and q include the output layer's padding rows beyond the tokenizer"),
    Mutant("stopped-round-keeps-bonus", "specdec/decode/record.py",
           "stopped_in_drafts = len(outcome.emitted) <= len(path)", "stopped_in_drafts = False",
           "a round cut at a stop token still records the uncut accepted count and a bonus"),
    Mutant("clock-without-sync", "specdec/model/devices.py",
           "        synchronize(self.device)\n", "",
           "phase times read without waiting for the device (CUDA/MPS time only the launch)"),
    Mutant("contract-as-assert", "specdec/decode/rule.py",
           "    if not bool((q_x > 0).all()):\n",
           "    assert bool((q_x > 0).all())\n    if False:\n",
           "q(x) > 0 checked by an assert, which python -O removes"),
    Mutant("int-temperature-kept", "specdec/options.py",
           "            object.__setattr__(record, f.name, float(value))", "            pass",
           "an integer temperature reaches transformers' warper, which refuses it"),
    Mutant("a-counts-untested", "specdec/teach/theory.py",
           "        tested += r.tested\n", "        tested += len(r.positions)\n",
           "the theory's a divides by every drafted position, the untested ones after a rejection too"),
    Mutant("per-position-over-reached-plus-one", "specdec/trace.py",
           "per_position_acceptance=tuple(k / n if n else 0.0 for k, n in zip(kept, reached)),",
           "per_position_acceptance=tuple(k / (n + 1) if n else 0.0 for k, n in zip(kept, reached)),",
           "per-position acceptance divides by the positions reached plus one"),
    Mutant("drafted-counts-after-stop", "specdec/trace.py",
           "        return sum(p.status != AFTER_STOP for p in self.positions)\n",
           "        return len(self.positions)\n",
           "drafts after a kept stop token, never emitted, count as drafted"),
    Mutant("confidence-stops-a-token-late", "specdec/decode/drafters.py",
           "            token, unsure = self._read(ids[-1], sure[-1], confidence)\n",
           "            token, unsure = self._read(ids[-1], sure[-2] if len(sure) > 1 else sure[-1] + 1, confidence)\n",
           "the adaptive draft stops one token after the unsure one"),
    Mutant("confidence-stops-when-sure", "specdec/decode/drafters.py",
           "        return int(token), sure < confidence\n",
           "        return int(token), sure <= 2 * confidence\n",
           "the adaptive draft stops after tokens it is sure of"),
    Mutant("noise-not-reported", "specdec/decode/drafters.py",
           "            dists.append(q)\n", "            dists.append(probs_from_logits(logits, sampling))\n",
           "a noisy draft samples from q' but reports the clean q"),
    Mutant("greedy-fast-path-stops-late", "specdec/decode/drafters.py",
           "            sure.append(top_probabilities(logits))        # (1,)\n",
           "            sure.append(top_probabilities(rows[-2] if fast and len(rows) > 1 else logits))\n",
           "the T = 0 fast path stops one token after the unsure one"),
    Mutant("hybrid-reports-another-q", "specdec/decode/drafters.py",
           "            return replace(copy, source=DraftedBy.LOOKUP)\n",
           "            return replace(copy, probs=mix_uniform(copy.probs, 0.5), source=DraftedBy.LOOKUP)\n",
           "the hybrid's lookup tokens carry a q they were not drawn from"),
    Mutant("onednn-one-scale-per-batch", "specdec/model/kernels.py",
           "        s = x.abs().amax(-1, keepdim=True).clamp_min_(1e-30).div_(127)               # (rows, 1)\n",
           "        s = x.abs().amax().clamp_min_(1e-30).div_(127).expand(x.shape[0], 1)         # (rows, 1)\n",
           "oneDNN int8 quantises the batch on one scale: a row's result depends on its batch (run only "
           "where the CPU has VNNI or AMX, where that kernel is offered)", needs="onednn-int8"),
    Mutant("long-chunk-mask-off-by-one", "specdec/model/qwen2.py",
           "torch.ones(T, L + T, dtype=torch.bool, device=self.device).tril(L)",
           "torch.ones(T, L + T, dtype=torch.bool, device=self.device).tril(L + 1)",
           "a prefill chunk longer than EXACT_ROWS sees one future token (the fused masked attention)"),
    Mutant("row-attention-sees-next-token", "specdec/model/qwen2.py",
           "keys[None, :, : L + t + 1],\n                                                            values[None, :, : L + t + 1]",
           "keys[None, :, : L + t + 2],\n                                                            values[None, :, : L + t + 2]",
           "torch's row-by-row attention (where specdec's kernels are not) lets a verification row see the next token"),
    Mutant("gpu-verifier-not-padded", "specdec/model/qwen2.py",
           "        R = max(T, self.pad_rows)                                                        # rows computed\n",
           "        R = T\n",
           "a GPU verifier's forwards run at their own row counts, so verification and verifier-only use other GEMMs"),
    Mutant("real-rope-sign-flipped", "specdec/model/qwen2.py",
           "torch.stack([a * cos - b * sin, a * sin + b * cos], -1)",
           "torch.stack([a * cos + b * sin, a * sin + b * cos], -1)",
           "RoPE as real halves (MPS) rotates by the wrong sign: not the complex multiply it replaces"),
    Mutant("static-mask-sees-the-future", "specdec/model/qwen2.py",
           "            mask = torch.arange(C, device=dev)[None] <= slots[:, None]                   # (R, C) causal\n",
           "            mask = torch.arange(C, device=dev)[None] <= slots[:, None] + 1\n",
           "the static cache's causal mask lets each row see the next slot"),
    Mutant("packed-size-unchecked", "specdec/weights/packed.py",
           "        if size != self.base + end:\n",
           "        if False:\n",
           "a cached file cut short is opened anyway: its last tensors would be read from past the end"),
    Mutant("packed-checksum-trusted", "specdec/weights/store.py",
           "    if record.get(\"checked\") == stamp:\n",
           "    if True:\n",
           "a cached file's checksum is never compared: a flipped bit is computed on"),
    Mutant("dequant-q4k-min-added", "specdec/weights/dequant.py",
           "    return (d * q - dm).reshape(n, QK_K)\n",
           "    return (d * q + dm).reshape(n, QK_K)\n",
           "Q4_K's per-block minimum added instead of subtracted: every weight of the verifier shifted"),
    Mutant("tree-residual-not-updated", "specdec/decode/rule.py",
           "                r[out] = _residual(r[out], q_i[~take])\n", "",
           "a rejected sibling leaves the residual as it was: the next sibling is tested against the old target"),
    Mutant("tree-q-not-renormalised", "specdec/decode/rule.py",
           "kept / kept.sum(-1, keepdim=True).clamp_min(1e-30)", "kept",
           "the next sibling's q has the earlier siblings removed but is not renormalised"),
    Mutant("tree-mask-sees-every-row", "specdec/decode/tree.py",
           "        keys.append(cached + j + 1 if anc == list(range(j + 1)) else torch.cat([ctx, cached + torch.tensor(anc)]))\n",
           "        keys.append(cached + j + 1)\n",
           "a tree node attends to every row before it (its cousins too), not just its ancestors"),
    Mutant("tree-rope-by-row", "specdec/decode/tree.py",
           "    return TreeAttention(cached + torch.tensor(d), tuple(keys), exact=True)",
           "    return TreeAttention(cached + torch.arange(len(d)), tuple(keys), exact=True)",
           "a tree node's position is its row, not the context length plus its depth"),
    Mutant("tree-cache-keeps-first-rows", "specdec/decode/engine.py",
           "        target.keep(cached + 1, [cached + j for j in path])\n",
           "        target.keep(cached + 1, [cached + 1 + i for i in range(len(path))])\n",
           "after a tree round the verifier keeps the first rows, not the accepted path's"),
    Mutant("tree-children-by-their-own-q", "specdec/decode/tree.py",
           "            for _, j, n in planned:\n"
           "                parents += [j] * n\n"
           "            ids, q_ids = self._children(rows, tops, planned, sampling, noise, generator)\n",
           "            ids, q_ids = self._children(rows, tops, planned, sampling, noise, generator)\n"
           "            owners = [j for _, j, n in planned for _ in range(n)]\n"
           "            kept = [(o, t, x) for o, t, x in zip(owners, ids, q_ids) if x > 0.2]\n"
           "            parents += [o for o, _, _ in kept]\n"
           "            ids, q_ids = [t for _, t, _ in kept], [x for _, _, x in kept]\n",
           "a drafted child is kept only if its own q is large: its presence depends on its value, which biases the test"),
    Mutant("untested-shows-numbers", "specdec/teach/render.py",
           "                row = row[:4] + [DASH, DASH, DASH, Status(pos.status).text]",
           "                row = row + [DASH, DASH, Status(pos.status).text]",
           "the step table gives p/q and u for a draft after the rejection"),
    Mutant("avx2-silu-sign-flipped", "specdec/model/csrc/qlinear.cpp",
           "const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v));",
           "const __m256 e = exp_avx2(v);",
           "the AVX2 prologue's SiLU computes x / (1 + e^x): the gated MLP's activations are wrong"),
    Mutant("scalar-silu-sign-flipped", "specdec/model/csrc/qlinear.cpp",
           "v / (1.f + exp_scalar(0.f - v))", "v / (1.f + exp_scalar(v))",
           "the scalar prologue's SiLU computes x / (1 + e^x)"),
    Mutant("avx2-activation-tail-dropped", "specdec/model/csrc/qlinear.cpp",
           "  for (; k < K; ++k) q[k] = (int8_t)std::min(127.f, std::max(-127.f, std::nearbyint(x[k] * inv)));\n", "",
           "the AVX2 activation quantisation leaves the inputs after its last whole vector at 0 (K not a multiple "
           "of 8)"),
    Mutant("vnni-correction-tail-dropped", "specdec/model/csrc/qlinear.cpp",
           "      for (int64_t k = a.G * GROUP; k < Kp; ++k) total += q[k];\n", "",
           "the int8 VNNI correction 128 * sum(xq) leaves out the inputs past the last group of 32 (run only "
           "where the CPU has AVX-VNNI or AVX512-VNNI, the paths that subtract it)", needs="vnni"),
    Mutant("layer-rope-sign-flipped", "specdec/model/csrc/qlinear.cpp",
           "        dst[2 * j + 1] = a * sn + b * c;\n", "        dst[2 * j + 1] = a * sn - b * c;\n",
           "the one-call decoder layer rotates q and k by the wrong angle's sine in one half of each pair"),
    Mutant("layer-value-slot-fixed", "specdec/model/csrc/qlinear.cpp",
           "std::memcpy(vc + (g * C + L + t) * D,", "std::memcpy(vc + (g * C + L) * D,",
           "the one-call decoder layer writes every new row's values to the first new slot"),
    Mutant("epilogue-bias-dropped", "specdec/model/csrc/qlinear.cpp",
           "float v = o.bias ? vals16[c] + o.bias[n0 + c] : vals16[c];", "float v = vals16[c];",
           "the scalar and AVX2 paths' epilogue leaves the bias out"),
    Mutant("rejected-chip-keeps-newline", "specdec_ui/markup.py",
           "<span class=\"rej-text\">{whitespace_html(s.text, keep=False)}</span>",
           "<span class=\"rej-text\">{whitespace_html(s.text)}</span>",
           "a rejected draft's line break breaks the kept text"),
]


def scratch_copy() -> Path:
    """Every file git tracks, copied to a temporary directory: the tests see the tree they see in a
    clean clone (the README, the committed results, the notebooks), and nothing built or cached."""
    dest = Path(tempfile.mkdtemp(prefix="specdec-mutant-"))
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def libraries(where: Path) -> list[Path]:
    """specdec's built C++ kernels in a copy (what specdec.model.native loads)."""
    return sorted((where / "specdec" / "model").glob("_qlinear*"))


def build_kernels(where: Path, timeout: int) -> None:
    """Builds specdec's C++ kernels in a copy: git does not track the built library, and without it
    their tests skip. Where the build fails (a mutant that does not compile, no compiler) no library
    appears; the build is optional, as in the package's install."""
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=where, capture_output=True,
                   timeout=timeout)


# The tests of a source file's area run first, so that -x stops at the nearest catch (pytest skips a path given twice).
AREA_TESTS = {"specdec/model": "tests/model", "specdec/model/csrc": "tests/model", "specdec/weights": "tests/model",
              "specdec/decode": "tests/decode",
              "specdec/teach": "tests/teach", "specdec_ui": "tests/ui", "specdec_ui/tabs": "tests/ui",
              "specdec": "tests/decode"}


def area_tests(path: str) -> list[str]:
    folder = str(Path(path).parent)
    return [AREA_TESTS[folder], "tests"] if folder in AREA_TESTS else ["tests"]


def run_tests(where: Path, timeout: int, first: list[str] | None = None) -> tuple[bool, str]:
    """(all passed, the first failing test or the reason); the tests in ``first`` run before the rest."""
    env = {**os.environ, "PYTHONPATH": str(where)}  # the copy, not the editable install
    check = subprocess.run([sys.executable, "-c", "import specdec; print(specdec.__file__)"], cwd=where, env=env,
                           capture_output=True, text=True)
    assert check.stdout.strip().startswith(str(where)), f"imports the wrong specdec: {check.stdout}{check.stderr}"
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                              "-m", "not real and not browser", *(first or [])], cwd=where, env=env, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"
    failed = [line for line in out.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return out.returncode == 0, (failed[0] if failed else out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--only", nargs="*", help="run only these mutants")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per test run (default 900)")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    missing = [m for m in chosen if m.needs and not NEEDS[m.needs]()]
    for m in missing:
        print(f"{m.name:28s} not run: this machine lacks {m.needs}, which the tests that kill it need")
    chosen = [m for m in chosen if m not in missing]
    if args.list or not chosen:
        for m in MUTANTS:
            print(f"{m.name:28s} {m.path:22s} {m.why}")
        return 0 if args.list else 2
    # The control: the unmutated copy must pass, or every "killed" below would mean nothing. Its
    # kernels are kept for the mutants of other files.
    where, built = scratch_copy(), Path(tempfile.mkdtemp(prefix="specdec-kernels-"))
    try:
        build_kernels(where, args.timeout)
        for lib in libraries(where):
            shutil.copy2(lib, built / lib.name)
        passed, detail = run_tests(where, args.timeout)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if not passed:
        print(f"the unmutated copy fails the tests ({detail}): fix that first; no mutant was run")
        shutil.rmtree(built, ignore_errors=True)
        return 2
    print("control: the unmutated copy passes", flush=True)
    survivors = []
    for m in chosen:
        where = scratch_copy()
        try:
            path = where / m.path
            text = path.read_text()
            if text.count(m.old) != 1:
                print(f"{m.name:28s} STALE: the planted text is not in {m.path} exactly once; update the mutant")
                survivors.append(m.name)
                continue
            path.write_text(text.replace(m.old, m.new))
            t0 = time.perf_counter()
            if path.suffix == ".cpp":  # the kernels rebuilt from the mutated source
                build_kernels(where, args.timeout)
                if any(built.iterdir()) and not libraries(where):
                    print(f"{m.name:28s} STALE: the mutated kernels do not build; update the mutant")
                    survivors.append(m.name)
                    continue
            else:
                for lib in built.iterdir():
                    shutil.copy2(lib, where / "specdec" / "model" / lib.name)
            passed, detail = run_tests(where, args.timeout, area_tests(m.path))
            verdict = "SURVIVED" if passed else "killed  "
            print(f"{m.name:28s} {verdict} {time.perf_counter() - t0:5.0f} s  {detail}", flush=True)
            if passed:
                survivors.append(m.name)
        finally:
            shutil.rmtree(where, ignore_errors=True)
    shutil.rmtree(built, ignore_errors=True)
    print(f"\n{len(chosen) - len(survivors)}/{len(chosen)} mutants killed" +
          (f"; survivors: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

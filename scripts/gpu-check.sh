#!/usr/bin/env bash
# The one prepared run for a lent GPU machine (its own image: torch with CUDA, transformers; no
# registry, no embedded weights): the `gpu` test tier on tiny random models, then the forward-cost
# benchmark on random models of the embedded pair's shapes. Everything lands in $OUT (default
# benchmarks/results): gpu-tests.log and gpu_costs-<gpu>.json; `python -m benchmarks.report`
# then renders the JSON into docs/results.md. If pytest is missing on the image, carry its wheels in
# wheels/ (pytest, pluggy, iniconfig, packaging) and they are installed offline first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
python - <<'EOF'
import torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__,
      "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0),
      "mps", torch.backends.mps.is_available())
EOF
python -c "import pytest" 2>/dev/null || python -m pip install --no-index --find-links wheels pytest
# the gpu tier only: the CPU suite needs the embedded weights and the dev tools, absent there
timeout 300 python -m pytest -q -m gpu -o addopts="--strict-markers -ra" tests/model/test_devices.py tests/model/test_device_path.py \
  2>&1 | tee "$OUT/gpu-tests.log"
tests=${PIPESTATUS[0]}
slug=$(python -c "import torch,re;print(re.sub(r'[^a-z0-9]+','-',('cuda '+torch.cuda.get_device_name(0)).lower()).strip('-'))" 2>/dev/null || echo mps)
timeout 240 python -m benchmarks.gpu_costs --out "$OUT/gpu_costs-$slug.json"
bench=$?
echo "gpu tests rc=$tests, benchmark rc=$bench"
exit $(( tests || bench ))

#!/usr/bin/env bash
# llama-cpp-python, the runtime peer of benchmarks/throughput.py, built from source (~4 min on 2 cores).
# ggml's native build segfaults in its AMX matmul on Intel AMX CPUs: there, build for AVX2/AVX512
# without AMX. Usage: scripts/install-llama-cpp.sh PYTHON
set -euo pipefail
PY="${1:-python3}"
VERSION=0.3.36
if "$PY" -c "import llama_cpp" 2>/dev/null; then exit 0; fi
FLAGS="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
if [[ "$FLAGS" == *amx_tile* ]]; then
  ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  [[ "$FLAGS" == *avx512f* ]] && ARGS="$ARGS -DGGML_AVX512=ON"
  export CMAKE_ARGS="$ARGS"
fi
"$PY" -m pip install "llama-cpp-python==$VERSION"

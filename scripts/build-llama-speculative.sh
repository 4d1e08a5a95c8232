#!/usr/bin/env bash
# llama.cpp's own draft-model speculation (`llama-speculative-simple`), the peer of our speculative
# column in benchmarks/throughput.py: built offline from the llama.cpp source that the
# llama-cpp-python sdist vendors (~3 min on 2 cores). Native build, except on Intel AMX CPUs where
# ggml's AMX matmul segfaults (as in scripts/install-llama-cpp.sh).
# Usage: scripts/build-llama-speculative.sh PYTHON   -> prints the binary's path
set -euo pipefail
PY="${1:-python3}"
VERSION=0.3.36
ROOT="${SPECDEC_CACHE:-$HOME/.cache/specdec}/llama.cpp-$VERSION"
BIN="$ROOT/build/bin/llama-speculative-simple"
if [[ -x "$BIN" ]]; then echo "$BIN"; exit 0; fi
mkdir -p "$ROOT"
if [[ ! -d "$ROOT/src" ]]; then
  "$PY" -m pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$ROOT/sdist" >&2
  mkdir -p "$ROOT/src.tmp" && tar -xzf "$ROOT"/sdist/llama_cpp_python-*.tar.gz -C "$ROOT/src.tmp" --strip-components=1
  mv "$ROOT/src.tmp" "$ROOT/src"
fi
FLAGS="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
ARGS=(-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release)
if [[ "$FLAGS" == *amx_tile* ]]; then
  ARGS+=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  [[ "$FLAGS" == *avx512f* ]] && ARGS+=(-DGGML_AVX512=ON)
fi
cmake -S "$ROOT/src/vendor/llama.cpp" -B "$ROOT/build" "${ARGS[@]}" >&2
cmake --build "$ROOT/build" --target llama-speculative-simple -j 2 >&2
echo "$BIN"

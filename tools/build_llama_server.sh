#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (and `llama-quantize`, beside it, which makes the K-quant
# GGUFs of `make bench`) for `make bench`, from the llama.cpp sources vendored
# in the llama-cpp-python sdist (PyPI is the only registry reachable here). The build
# lives outside the repo, in $POOLED_BENCH_DIR (default ~/.cache/pooled/bench). It is a portable
# build (GGML_NATIVE=OFF): a -march=native build died with "Illegal instruction" on this VM.
#
#   tools/build_llama_server.sh            # prints the path of the built binary
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
root="${POOLED_BENCH_DIR:-$HOME/.cache/pooled/bench}"
binary="$root/llama.cpp-build-portable/bin/llama-server"
python="${PYTHON:-python3}"

if [ -x "$binary" ] && [ -x "$(dirname "$binary")/llama-quantize" ]; then
  echo "$binary"
  exit 0
fi
mkdir -p "$root"
if [ ! -d "$root/llama_cpp_python-$version" ]; then
  "$python" -m pip download --no-deps --no-binary :all: -q -d "$root" "llama-cpp-python==$version" >&2
  tar -xzf "$root/llama_cpp_python-$version.tar.gz" -C "$root"
fi
cmake -S "$root/llama_cpp_python-$version/vendor/llama.cpp" -B "$root/llama.cpp-build-portable" \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF >&2
cmake --build "$root/llama.cpp-build-portable" --target llama-server llama-quantize -j "$(nproc)" >&2
echo "$binary"

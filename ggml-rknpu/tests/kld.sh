#!/usr/bin/env bash
# KL divergence of the backend's logits from the CPU's, per quantised weight type, with
# the CPU's own F16-versus-quantised divergence beside it for scale (docs/ggml.md).
#
# For each type T of the test model (tests/make_tiny_llama.py: Q8_0 and Q4_0 written by
# gguf-py, Q4_K_M by llama-quantize from the F16 model), llama-perplexity runs over the
# repository's LICENSE-APACHE (a fixed text; 8 chunks of 128 tokens):
#   cpu(T) -> saved logits;  npu(T) vs cpu(T);  cpu(F16) -> saved logits;  cpu(T) vs cpu(F16)
# and prints one markdown row per type: mean KLD and same-top-token rate of each pair.
# Every run must finish and report finite figures.
#
# Usage: bash ggml-rknpu/tests/kld.sh      (after build.sh; needs python3 with gguf==0.19.0)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/target/ggml"
src="$root/target/ggml-src/llama.cpp-0.3.36"
models="$out/models"
logs="$out/test-logs/kld"
text="$root/LICENSE-APACHE"
args=(-f "$text" -c 128 -b 128 --chunks 8)
mkdir -p "$models" "$logs"

fail() {
    echo "error: $*" >&2
    exit 1
}

model() {
    local type=$1 path="$models/tiny-$1.gguf"
    case "$type" in
    q4_k)
        model f16 >/dev/null
        "$out/bin/llama-quantize" "$models/tiny-f16.gguf" "$path" Q4_K_M >"$logs/quantize.log" 2>&1 ||
            fail "llama-quantize failed (log: $logs/quantize.log)"
        ;;
    *)
        python3 "$root/ggml-rknpu/tests/make_tiny_llama.py" \
            --vocab "$src/models/ggml-vocab-llama-spm.gguf" --out "$path" --type "$type" >/dev/null
        ;;
    esac
    echo "$path"
}

# perplexity NAME MODEL BASE [backend]: saves logits to BASE, or compares with them
perplexity() {
    local name=$1 model=$2 base=$3 mode=$4 log="$logs/$1.log"
    local env=()
    [ "$mode" = npu ] && env=(RKNPU_DEVICE=emu GGML_BACKEND_PATH="$out/libggml-rknpu.so")
    local extra=(--kl-divergence-base "$base")
    [ -f "$base" ] && extra+=(--kl-divergence)
    env "${env[@]}" "$out/bin/llama-perplexity" -m "$model" "${args[@]}" "${extra[@]}" >"$log" 2>&1 ||
        fail "llama-perplexity $name failed (log: $log)"
    echo "$log"
}

# the mean KLD and same-top rate of a comparison's log
figures() {
    local kld top
    kld=$(grep -E "^Mean +KLD:" "$1" | head -n 1 | awk '{print $3}')
    top=$(grep -E "^Same top p:" "$1" | head -n 1 | awk '{print $4}')
    [[ "$kld" =~ ^[0-9.]+$ && "$top" =~ ^[0-9.]+$ ]] || fail "no KLD figures in $1"
    echo "$kld | $top %"
}

f16=$(model f16)
rm -f "$logs"/*.kld
perplexity cpu-f16 "$f16" "$logs/cpu-f16.kld" cpu >/dev/null
echo "| weights | NPU vs CPU, same weights: mean KLD | same top token | CPU, quantised vs F16: mean KLD | same top token |"
echo "|---|---|---|---|---|"
for type in q8_0 q4_0 q4_k; do
    m=$(model "$type")
    perplexity "cpu-$type" "$m" "$logs/cpu-$type.kld" cpu >/dev/null
    npu=$(perplexity "npu-$type-vs-cpu" "$m" "$logs/cpu-$type.kld" npu)
    cpu=$(perplexity "cpu-$type-vs-f16" "$m" "$logs/cpu-f16.kld" cpu)
    npu_figures=$(figures "$npu")
    cpu_figures=$(figures "$cpu")
    echo "| ${type^^} | $npu_figures | $cpu_figures |"
done

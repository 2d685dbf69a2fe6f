#!/usr/bin/env bash
# The ggml backend's tests on the emulated kernel (RKNPU_DEVICE=emu), after
# `bash ggml-rknpu/build.sh`:
#
# 1. ggml's own test-backend-ops for every op the backend claims: every case it runs
#    must pass, the run must show that the RKNPU backend itself was tested (the suite
#    prints "backends passed" even when no device registered), and at least the given
#    number of cases must have run. In the default run, F16 inputs must have been
#    written straight into the NPU's input buffer (rknpu_mul_mat_write).
# 2. llama.cpp end to end: a seeded llama-architecture model with F16 weights
#    (tests/make_tiny_llama.py) generates 32 greedy tokens with llama-simple, on the CPU
#    alone and with the backend loaded; the texts must be identical, the backend must
#    have run NPU jobs, and products sharing their input must have run as one job.
#    With Q8_0 weights in int8 banks (RKNPU_GGML_WEIGHTS=int8) the run must finish on
#    the NPU (its text is not compared: the requantised weights move the logits).
# 3. Memory: on an 87 MB F16 model, llama-simple's peak RSS with the backend is at most
#    1.5x the CPU-only run's (the weights are held once).
#
# Usage: bash ggml-rknpu/tests/run.sh      (needs python3 with gguf==0.19.0 for step 2)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/target/ggml"
src="$root/target/ggml-src/llama.cpp-0.3.36"
backend="$out/libggml-rknpu.so"
logs="$out/test-logs"
mkdir -p "$logs"

fail() {
    echo "error: $*" >&2
    exit 1
}

# test-backend-ops OP MIN_CASES [LABEL]: the suite's cases of OP on the RKNPU backend
# (LABEL names the log and the line of a run in another configuration)
backend_ops() {
    local op=$1 min=$2 log="$logs/test-backend-ops-$1${3:+-$3}.log"
    echo "-- test-backend-ops -o $op -b RKNPU${3:+ ($3)}"
    if ! RKNPU_DEVICE=emu GGML_BACKEND_PATH="$backend" RKNPU_GGML_STATS=1 \
        "$out/bin/test-backend-ops" test -o "$op" -b RKNPU >"$log" 2>&1; then
        grep -E "FAIL|error" "$log" | head -n 40 >&2 || true
        fail "test-backend-ops $op failed (log: $log)"
    fi
    grep -qE "^Backend [0-9]+/[0-9]+: RKNPU$" "$log" ||
        fail "test-backend-ops did not test the RKNPU backend (log: $log)"
    local summary passed total
    summary=$(grep -E "^  [0-9]+/[0-9]+ tests passed$" "$log") ||
        fail "no RKNPU test summary in $log"
    [ "$(echo "$summary" | wc -l)" -eq 1 ] || fail "more than one test summary in $log"
    passed=$(echo "$summary" | sed -E 's#^ *([0-9]+)/([0-9]+).*#\1#')
    total=$(echo "$summary" | sed -E 's#^ *([0-9]+)/([0-9]+).*#\2#')
    [ "$passed" -eq "$total" ] || fail "$op: $passed of $total cases passed"
    [ "$total" -ge "$min" ] || fail "$op: only $total cases ran on RKNPU (at least $min expected)"
    local written
    written=$(sed -nE 's#^rknpu: .* ([0-9]+) inputs written in place$#\1#p' "$log" | awk '{s += $1} END {print s + 0}')
    echo "   $op${3:+ ($3)}: $passed/$total cases passed on RKNPU ($(grep -c 'not supported' "$log") not claimed;" \
        "$written products with their input written in place)"
}

backend_ops MUL_MAT 1000
# F16 rows on fp16 banks go straight into the NPU's input buffer (rknpu_mul_mat_write)
grep -qE "^rknpu: .* [1-9][0-9]* inputs written in place$" "$logs/test-backend-ops-MUL_MAT.log" ||
    fail "no MUL_MAT case wrote its input in place (log: $logs/test-backend-ops-MUL_MAT.log)"
# int8 banks for the quantised weight types (docs/ggml.md, "Weights in int8")
RKNPU_GGML_WEIGHTS=int8 backend_ops MUL_MAT 1000 int8

echo "-- llama-simple: 32 greedy tokens, CPU alone and with the backend (F16 weights)"
model="$out/models/tiny-f16.gguf"
mkdir -p "$out/models"
python3 "$root/ggml-rknpu/tests/make_tiny_llama.py" \
    --vocab "$src/models/ggml-vocab-llama-spm.gguf" --out "$model" --type f16 >/dev/null
prompt="Once upon a time"
"$out/bin/llama-simple" -m "$model" -n 32 "$prompt" >"$logs/simple-cpu.out" 2>"$logs/simple-cpu.err" ||
    fail "llama-simple on the CPU failed (log: $logs/simple-cpu.err)"
RKNPU_DEVICE=emu GGML_BACKEND_PATH="$backend" RKNPU_GGML_STATS=1 \
    "$out/bin/llama-simple" -m "$model" -n 32 "$prompt" >"$logs/simple-npu.out" 2>"$logs/simple-npu.err" ||
    fail "llama-simple with the backend failed (log: $logs/simple-npu.err)"
if ! cmp -s "$logs/simple-cpu.out" "$logs/simple-npu.out"; then
    diff "$logs/simple-cpu.out" "$logs/simple-npu.out" >&2 || true
    fail "the backend's text differs from the CPU's"
fi
stats=$(grep -E "^rknpu: " "$logs/simple-npu.err") || fail "the backend printed no statistics"
jobs=$(echo "$stats" | sed -E 's#.* ([0-9]+) NPU jobs.*#\1#')
products=$(echo "$stats" | sed -E 's#.* ([0-9]+) MUL_MAT nodes.*#\1#')
[ "$jobs" -gt 0 ] || fail "llama-simple ran no NPU job ($stats)"
# products sharing their input (K and V, gate and up) run as one job
[ "$jobs" -lt "$products" ] || fail "no products were joined into one job ($stats)"
echo "   same text as the CPU: $(tr -d '\n' <"$logs/simple-npu.out" | cut -c1-100)"
echo "   $stats: $((jobs / 32)) jobs a token for $((products / 32)) products (32 evaluations)"
echo "-- llama-simple with Q8_0 weights in int8 banks (RKNPU_GGML_WEIGHTS=int8)"
# the requantised weights change the logits slightly, so the text is not compared: the
# run must finish and its products must have run on the NPU from int8 banks
q8_model="$out/models/tiny-q8_0.gguf"
python3 "$root/ggml-rknpu/tests/make_tiny_llama.py" \
    --vocab "$src/models/ggml-vocab-llama-spm.gguf" --out "$q8_model" --type q8_0 >/dev/null
RKNPU_DEVICE=emu GGML_BACKEND_PATH="$backend" RKNPU_GGML_STATS=1 RKNPU_GGML_WEIGHTS=int8 \
    "$out/bin/llama-simple" -m "$q8_model" -n 32 "$prompt" >"$logs/simple-int8.out" 2>"$logs/simple-int8.err" ||
    fail "llama-simple with int8 banks failed (log: $logs/simple-int8.err)"
stats=$(grep -E "^rknpu: " "$logs/simple-int8.err") || fail "the backend printed no statistics (int8)"
jobs=$(echo "$stats" | sed -E 's#.* ([0-9]+) NPU jobs.*#\1#')
[ "$jobs" -gt 0 ] || fail "llama-simple with int8 banks ran no NPU job ($stats)"
echo "$stats" | grep -q " 0 weights packed per call" || fail "weights were packed per call ($stats)"
echo "   $(tr -d '\n' <"$logs/simple-int8.out" | cut -c1-100)"
echo "   $stats"
echo "-- peak memory: llama-simple on an 87 MB F16 model, CPU alone and with the backend"
# the weights are held once (docs/ggml.md): at most 1.5x the CPU-only run's peak RSS
mem_model="$out/models/mem-f16.gguf"
python3 "$root/ggml-rknpu/tests/make_tiny_llama.py" \
    --vocab "$src/models/ggml-vocab-llama-spm.gguf" --out "$mem_model" --type f16 \
    --embd 512 --ff 1024 --heads 8 --kv-heads 8 --layers 4 >/dev/null
# peak_rss_kib LOG COMMAND...: runs COMMAND (output to LOG) and prints its peak RSS in KiB
peak_rss_kib() {
    python3 - "$@" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "wb") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
if rc != 0:
    sys.exit(f"{sys.argv[2]} exited with {rc} (log: {sys.argv[1]})")
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}
cpu_kib=$(peak_rss_kib "$logs/mem-cpu.log" "$out/bin/llama-simple" -m "$mem_model" -n 32 "$prompt") ||
    fail "llama-simple on the CPU failed"
npu_kib=$(RKNPU_DEVICE=emu GGML_BACKEND_PATH="$backend" \
    peak_rss_kib "$logs/mem-npu.log" "$out/bin/llama-simple" -m "$mem_model" -n 32 "$prompt") ||
    fail "llama-simple with the backend failed"
echo "   peak RSS: CPU alone $((cpu_kib / 1024)) MiB, with the backend $((npu_kib / 1024)) MiB"
[ $((npu_kib * 2)) -le $((cpu_kib * 3)) ] ||
    fail "peak RSS with the backend is more than 1.5x the CPU run's ($npu_kib KiB against $cpu_kib KiB)"
echo "ggml-rknpu: OK"

#!/usr/bin/env bash
# The checks that need a GPU, in one run (a lent GPU machine has minutes, not hours):
#   1. the cost model's kernel classes measured on this GPU (benchmarks/gpu_kernels.py);
#   2. the engine on --device cuda against --device cpu, token for token (engine_device_parity.py);
#   3. the engine's throughput on the GPU, alone and against transformers (engine_throughput.py);
#   4. `tokenmill serve --device cuda` driven by `tokenmill bench` (2 × C untimed warm-ups first).
# Usage: OUT=dir bash benchmarks/gpu_check.sh  (python3 must have torch with CUDA and tokenmill's
# dependencies importable; PYTHONPATH may add src/). Each step runs even if one before it failed.
# DEVICE=cpu SMOKE=1 runs every step small on a CPU, to try the script before a GPU is lent.
set -u
OUT=${OUT:?set OUT to a directory for the results}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
if [ -n "${SMOKE:-}" ]; then
    small=(--smoke) levels=1,8 reps=1 prompts=(--prompts 4 --new-tokens 8) requests=16
else
    small=() levels=1,8,32,64 reps=3 prompts=() requests=256
fi
export PYTHONUNBUFFERED=1
log=$OUT/gpu_check.log
step() { echo "=== $* ($(date -u +%T))" | tee -a "$log"; }

step nvidia-smi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv >>"$log" 2>&1

step kernels
$PY benchmarks/gpu_kernels.py measure "${small[@]}" --out "$OUT/kernels.json" >>"$log" 2>&1

step parity
$PY benchmarks/engine_device_parity.py --device "$DEVICE" "${prompts[@]}" --out "$OUT/parity.json" >>"$log" 2>&1

step engine throughput, tokenmill alone
$PY benchmarks/engine_throughput.py --device "$DEVICE" --skip-hf --concurrency $levels --reps $reps \
    --out "$OUT/engine_cuda.md" >>"$log" 2>&1

step engine throughput, against transformers
$PY benchmarks/engine_throughput.py --device "$DEVICE" --concurrency ${levels%,64} --reps $reps \
    --out "$OUT/engine_cuda_hf.md" >>"$log" 2>&1

step serve and bench
$PY -m tokenmill.cli serve --device "$DEVICE" --port 8123 >>"$log" 2>&1 &
server=$!
$PY -c "
import time, httpx
for _ in range(240):
    try:
        if httpx.get('http://127.0.0.1:8123/health').status_code == 200: break
    except httpx.HTTPError: pass
    time.sleep(0.5)
" >>"$log" 2>&1
for c in 1 16 64; do
    n=$((requests * c / 64 > 32 ? requests * c / 64 : 32))  # 32, 64 and 256 requests
    [ -n "${SMOKE:-}" ] && n=$requests
    $PY -m tokenmill.cli bench --base-url http://127.0.0.1:8123 --model tokenmill-default --workload random \
        --isl 128 --osl 64 --tokenizer-vocab 4096 --num-prompts $n --concurrency $c --seed 0 \
        --num-warmups $((2 * c)) --json \
        >"$OUT/bench_c$c.json" 2>>"$log"
    echo "bench c=$c rc=$?" >>"$log"
done
kill $server
wait $server 2>/dev/null
step done

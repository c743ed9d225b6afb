python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src || exit
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p $OUT/tl
echo "== start $(date +%T)"
timeout 380 python3 benchmarks/bench_vs_simulate.py --device cuda --num-prompts 128 --out $OUT/bench_vs_simulate_cuda.md --figure $OUT/bench-vs-simulate-cuda.png 2>&1
cp ~/.cache/tokenmill/hardware/cuda.* $OUT/ 2>/dev/null; ls $OUT
echo "== timeline $(date +%T)"
timeout 175 python3 benchmarks/serve_timeline.py --device cuda --concurrency 1,16,32 --num-prompts 32 --variant off,on,off,on --out $OUT/tl 2>&1 | grep -v "requests$"
rm -f $OUT/tl/*.log $OUT/bench-vs-simulate-cuda.svg
echo "== done $(date +%T)"

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src || exit
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee $OUT/run.log
python3 -c "import torch,sys;print(torch.__version__, sys.version.split()[0])" | tee -a $OUT/run.log
nproc | tee -a $OUT/run.log
timeout 420 python3 benchmarks/serve_timeline.py --device cuda --concurrency 1,4,16,32 --num-prompts 32 --variant base,first,every --out $OUT 2>&1 | tee -a $OUT/run.log
tail -5 $OUT/*.server.log; ls -la $OUT

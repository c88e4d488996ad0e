#!/usr/bin/env bash
# GPU call 1: tests, tuning sweep, asv smoke run (per-fork overhead).
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv | tee $OUT/gpu.txt
echo "== pytest"; date
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests 2>&1 | tail -25 | tee $OUT/pytest.txt
echo "== tune"; date
PYTHONPATH=$ROOT:/tmp/site timeout 200 python3 tools/tune_forward.py --dtypes bf16 > $OUT/tune.md 2>&1
grep BEST $OUT/tune.md
echo "== asv"; date
git clone -q .carry/repo.bundle /tmp/repo && cd /tmp/repo && git checkout -q main
( time timeout 150 python3 tools/bench.py run HEAD --wheels $ROOT/.whl --asv-args "-b Forward.time_device -b Host -e" ) > $OUT/asv.txt 2>&1
tail -40 $OUT/asv.txt
tar czf $OUT/results.tgz results provenance 2>/dev/null
date

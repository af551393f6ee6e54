#!/usr/bin/env bash
# One device call that checks and times the standard library on a CUDA GPU: every GPU test, then the
# quick forms of the benchmarks, each phase under its own time limit so that one hang cannot take the
# call. Run from the repository root (on the device machine: after installing the carried wheels,
# with PYTHONPATH=$PWD); results go to $OUT (default /tmp/kc_gpu_check).
#
#     bash benchmarks/gpu_check.sh [tests] [matmul] [attention] [math]    (no argument: all four)
#
# tests:     pytest -m gpu over tests/, in $SHARDS (4) processes (junit XML and each shard's output in $OUT)
#            ($TEST_FILES: a glob of test files instead of all; $TEST_TIMEOUT: seconds a shard may run, 330)
# matmul:    bench_matmul.py --sass (bf16/FP8 squares, LLM shapes, row-major B; vs cuBLAS and Triton)
# attention: bench_attention.py --quick (FA2 and Hopper prefill vs SDPA flash/cuDNN; decode, MLA vs copy)
# math:      bench_math.py --no-accuracy (GElem/s vs torch and Triton), accuracy only with MATH_ONLY=f,g
set -u
OUT=${OUT:-/tmp/kc_gpu_check}
mkdir -p "$OUT"
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(tests matmul attention math)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/device.txt"
rc=0
for p in "${phases[@]}"; do
  echo "== $p ($(date -u +%H:%M:%S))"
  case $p in
    tests) # The test files dealt round-robin to $SHARDS pytest processes at once: compiling is CPU
           # work (16 cores there), and one process took over 330 s for the whole GPU suite.
           n=${SHARDS:-4}; shopt -s globstar; files=(${TEST_FILES:-tests/**/test_*.py}); pids=()
           for ((i = 0; i < n; i++)); do
             shard=(); for ((j = i; j < ${#files[@]}; j += n)); do shard+=("${files[j]}"); done
             timeout "${TEST_TIMEOUT:-330}" python3 -m pytest -q -rf --tb=short -m gpu "${shard[@]}" -p no:cacheprovider \
               --junitxml="$OUT/gpu_tests_$i.xml" >"$OUT/tests_$i.txt" 2>&1 & pids+=($!)
           done
           trc=0; for pid in "${pids[@]}"; do wait "$pid" || trc=1; done
           for ((i = 0; i < n; i++)); do echo "-- shard $i"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests_$i.txt"; done \
             | tee "$OUT/tests.txt"
           (exit $trc) ;;
    matmul) timeout 120 python3 benchmarks/bench_matmul.py --sass --json "$OUT/matmul.json" 2>&1 | tee "$OUT/matmul.txt" \
             | tail -45 ;;
    attention) timeout 150 python3 benchmarks/bench_attention.py --quick --json "$OUT/attention.json" 2>&1 \
             | tee "$OUT/attention.txt" | tail -40 ;;
    math) if [ -n "${MATH_ONLY:-}" ]; then
            timeout 150 python3 benchmarks/bench_math.py --no-speed --only "$MATH_ONLY" 2>&1 | tee "$OUT/math_acc.txt" | tail -30
          fi
          timeout 120 python3 benchmarks/bench_math.py --no-accuracy 2>&1 | tee "$OUT/math_speed.txt" | tail -40 ;;
    *) echo "unknown phase $p (tests, matmul, attention, math)"; rc=2 ;;
  esac
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
exit $rc

#!/usr/bin/env bash
# Device run "lead9" (issue 12, session 9, lead): the merged main on the device's Xeon under
# its defaults, beside the session's starting point (bin/*.base) and llama.cpp. Staged by
# scripts/device/stage_lead9.sh; `BUDGET=S bash .devcarry/lead9/run_lead9.sh` (log under $OUT).
#  - while the models are made (cairn synth, hf2gguf.py, llama-quantize; cores 4-15): the
#    AMX machine's tests under the defaults on cores 0,1, bench_attention new / base on core 2;
#  - pp8192 at 2 threads, six at once on their own core pairs: new, base, llama.cpp, for
#    Q4_K_M and Q8_0 (CAIRN_OP_TIMES=1 on the new ones); check-reference on core 3;
#  - meanwhile pp512 on cores 0,1 interleaved N B V L L V B N per type (V: bin/bench_engine.s3,
#    this build with -DAMX_KQ_SCHED=3, when staged), test_quant_kernels.s3 with the tests;
#  - after the 8K prompts: tg128 N L L N per type and the 2-thread raw read (bench_kernels)
#    on cores 0,1.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-330}
T0=$(date +%s)
. "$D/common.sh" # el, left, step, models_q06
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
unset CAIRN_ATTN_BF16TILE CAIRN_ATTN_BF16PAIR
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
grep -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
B=$D/bin; F=$D/fixtures/models
PP="--threads 2 --runs 1 --only pp"
( for t in test_attention_tile test_attn_tile_engine test_determinism test_attention test_attention_amx \
           test_attn_pair_engine test_backend test_quant_kernels test_quant_amx_emulated; do
    echo "--- $t (defaults)"; timeout 60 taskset -c 0,1 "$B/$t" 2>&1 | grep -E 'PASSED|FAILED|SKIPPED|ERROR|skipped|numerics|tile'; echo "rc ${PIPESTATUS[0]}"
  done
  if [ -x "$B/test_quant_kernels.s3" ]; then
    echo "--- test_quant_kernels.s3 (AMX_KQ_SCHED=3)"; timeout 60 taskset -c 0,1 "$B/test_quant_kernels.s3" 2>&1 | grep -E 'PASSED|FAILED|ERROR'; echo "rc ${PIPESTATUS[0]}"
  fi ) >/tmp/tests.log 2>&1 &
TPID=$!
( for v in new base new base; do
    b=$B/bench_attention; [ $v = base ] && b=$B/bench_attention.base
    echo "--- bench_attention $v"; timeout 60 taskset -c 2 $b --ctx 2048,8192 --reps 3 --numerics tile | grep ctx
  done ) >/tmp/attn.log 2>&1 &
APID=$!
M=/tmp/m9
models_q06 $M 4-15
PIDS=()
long8k() { # NAME CORES CMD...
  local name=$1 cores=$2; shift 2
  local l=$(( $(left) - 60 ))
  ( echo "start 8K $name (cores $cores, timeout $l s) at $(( $(date +%s) - T0 )) s"; timeout $l taskset -c $cores "$@"
    echo "rc $? at $(( $(date +%s) - T0 )) s" ) >"/tmp/8k-$name.log" 2>&1 &
  PIDS+=($!)
}
wait $TPID
long8k llama-Q8_0 14,15 $P/llama-bench -m $M/q06-Q8_0.gguf -t 2 -p 8192 -n 0 -r 1 --no-warmup
long8k llama-Q4_K_M 12,13 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 8192 -n 0 -r 1 --no-warmup
long8k new-Q4_K_M 4,5 env CAIRN_OP_TIMES=1 $B/bench_engine $PP --gguf $M/q06-Q4_K_M.gguf --long 8192
long8k new-Q8_0 6,7 env CAIRN_OP_TIMES=1 $B/bench_engine $PP --gguf $M/q06-Q8_0.gguf --long 8192
long8k base-Q4_K_M 8,9 $B/bench_engine.base $PP --gguf $M/q06-Q4_K_M.gguf --long 8192
long8k base-Q8_0 10,11 $B/bench_engine.base $PP --gguf $M/q06-Q8_0.gguf --long 8192
wait $APID
( for m in qwen3 llama; do
    echo "--- check-reference $m (defaults, bf16 K/V)"
    timeout 40 taskset -c 3 "$B/cairn" check-reference $F/$m --threads 1 --kv-dtype bf16 --max-diff 0.25 --min-margin 0.3
    echo "rc $?"
  done ) >/tmp/cref.log 2>&1 &
CPID=$!
for t in Q4_K_M Q8_0; do
  for who in N B V L L V B N; do
    case $who in
      V) [ -x $B/bench_engine.s3 ] && step "pp512 $t sched3" 25 taskset -c 0,1 $B/bench_engine.s3 $PP --gguf $M/q06-$t.gguf --long 0 ;;
      N) step "pp512 $t new" 25 taskset -c 0,1 $B/bench_engine $PP --gguf $M/q06-$t.gguf --long 0 ;;
      B) step "pp512 $t base" 25 taskset -c 0,1 $B/bench_engine.base $PP --gguf $M/q06-$t.gguf --long 0 ;;
      L) step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 512 -n 0 -r 1 2>&1 | grep pp512 ;;
    esac
  done
done
echo "=== tests (defaults)"; cat /tmp/tests.log
echo "=== bench_attention (core 2, one thread, tile order)"; cat /tmp/attn.log
wait $CPID; echo "=== check-reference"; cat /tmp/cref.log
el "waiting for the 8K prompts"
wait "${PIDS[@]}"
for f in /tmp/8k-*.log; do echo "=== $f"; grep -E 'start|pp8192|tok/s|attention |matmul quantized >=|rc |kernels' "$f"; done
for t in Q4_K_M Q8_0; do
  for who in N L L N; do
    if [ $who = N ]; then step "tg128 $t new" 25 taskset -c 0,1 $B/bench_engine --threads 2 --runs 1 --only tg --gguf $M/q06-$t.gguf --long 0
    else step "tg128 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128; fi
  done
done
step "raw read and vocab-head decode kernels, 2 threads" 40 env BENCH_QUANT_ONLY=1 BENCH_QUANT_NO_PREFILL=1 taskset -c 0,1 $B/bench_kernels 3
el done

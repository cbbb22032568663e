#!/usr/bin/env bash
# Device run "pp12" (issue 12, session 12, lead): pp512 at 2 threads on an otherwise idle
# device, main with the AVX-512 RMSNorm and q packing and the driver's per-call AMX side
# tables (bin/bench_engine) against the session's starting point f316c63 (bin/bench_engine.base)
# and llama.cpp, interleaved N B L L B N (Q4_K_M twice, Q8_0 once), after the AMX machine's
# kernel tests on the real tiles. Staged by scripts/device/stage_lead9.sh (BASE_DIR: f316c63's
# bench folder) into .devcarry/pp12 with this script copied in; `BUDGET=S bash
# .devcarry/pp12/run_pp12.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, run_begin
run_begin
for t in test_quant_kernels test_quant_amx_emulated test_determinism; do # the tests on the real tiles
  step "$t" 60 taskset -c 2,3 "$D/bin/$t" 2>&1 | grep -E 'PASSED|FAILED|SKIPPED|ERROR|^rc'
done
B=$D/bin; PP="--threads 2 --runs 1 --only pp --long 0"
M=/tmp/m9
models_q06 $M
for t in Q4_K_M Q4_K_M Q8_0; do
  for who in N B L L B N; do
    case $who in
      N) step "pp512 $t new" 25 taskset -c 0,1 $B/bench_engine $PP --gguf $M/q06-$t.gguf | grep pp512 ;;
      B) step "pp512 $t base" 25 taskset -c 0,1 $B/bench_engine.base $PP --gguf $M/q06-$t.gguf | grep pp512 ;;
      L) step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 512 -n 0 -r 1 2>&1 | grep pp512 ;;
    esac
  done
done
step "pp512 Q4_K_M new (op times)" 25 taskset -c 0,1 env CAIRN_OP_TIMES=1 $B/bench_engine $PP --gguf $M/q06-Q4_K_M.gguf
el done

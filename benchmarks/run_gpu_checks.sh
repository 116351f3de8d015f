#!/usr/bin/env bash
# The GPU checks of the rollout layer, run on the lent GPU machine after ../shared/gpu staging.
#   bash benchmarks/run_gpu_checks.sh rollout      # 2 GPUs: NCCL weight sync check + gsm8k recipe, 3 steps
#   bash benchmarks/run_gpu_checks.sh logprobs     # 2 GPUs: learner vs vLLM log-probs in bf16, rollout and learner checks
#   bash benchmarks/run_gpu_checks.sh throughput   # 1 GPU: rollout_throughput
#   bash benchmarks/run_gpu_checks.sh throughput-tp2  # 2 GPUs: rollout_throughput with tensor parallel 2
#   bash benchmarks/run_gpu_checks.sh learner      # 1 GPU: varlen attention test, learner_profile, learner_mfu
# Full logs go to $OUT (or /tmp/gpu-out); a short summary is printed last.
set -uo pipefail
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"; touch "$out/.start"
quiet() { grep -v -E "INFO|WARNING|Warning|it/s\]|^\s*$" | tail -n "$1"; }

case "${1:?rollout, logprobs, throughput, throughput-tp2 or learner}" in
rollout)
  if [ -z "${SKIP_CHECK:-}" ]; then
    timeout 330 python3 -m benchmarks.gpu_rollout_check > "$out/gpu_rollout_check.log" 2>&1
    echo "gpu_rollout_check rc=$?"; quiet 6 < "$out/gpu_rollout_check.log"
  fi
  work=$(mktemp -d)
  python3 -c "
from rayrl.data.gsm8k import write_synthetic_gsm8k
from rayrl.models.builder import QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS
shape = {k: v for k, v in QWEN2_1_5B_SHAPE.items() if k != 'vocab_size'}
save_random_qwen2('$work/model', chars=TEXT_CHARS, **shape)
write_synthetic_gsm8k('$work/gsm8k.jsonl', 512)
" > "$out/fixtures.log" 2>&1 || { echo "fixtures failed"; tail -20 "$out/fixtures.log"; }
  timeout 330 python3 recipes/gsm8k_grpo.py --config recipes/gsm8k_grpo.yaml model.path="$work/model" \
    data.path="$work/gsm8k.jsonl" learner.total_steps=3 rollout.batch_size=16 data.eval_size=32 \
    rollout.enforce_eager=true scheduler.include_dashboard=false metrics.run_dir="$out/runs" metrics.run_name=gsm8k-3 metrics.progress=false \
    > "$out/gsm8k_recipe.log" 2>&1
  echo "gsm8k recipe rc=$?"; grep -E '"(eval_accuracy_before|eval_accuracy_after|steps|samples|wall_s|step_s_mean|sync_s_per_step|aborted_samples)"' "$out/gsm8k_recipe.log" || quiet 30 < "$out/gsm8k_recipe.log"
  ;;
logprobs)
  timeout 280 python3 -m benchmarks.gpu_rollout_check --dtypes bfloat16 > "$out/gpu_rollout_check.log" 2>&1
  echo "gpu_rollout_check rc=$?"; quiet 6 < "$out/gpu_rollout_check.log"
  timeout 270 python3 -m benchmarks.gpu_learner_check > "$out/gpu_learner_check.log" 2>&1
  echo "gpu_learner_check rc=$?"; quiet 5 < "$out/gpu_learner_check.log"
  ;;
throughput-tp2)
  timeout 300 python3 -m benchmarks.rollout_throughput --tp 2 > "$out/rollout_throughput_tp2.log" 2>&1
  echo "rollout_throughput --tp 2 rc=$?"; quiet 6 < "$out/rollout_throughput_tp2.log"
  ;;
learner)
  export CUDA_VISIBLE_DEVICES=0
  timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_varlen_attention.py > "$out/test_varlen.log" 2>&1
  echo "test_varlen_attention rc=$?"; tail -n 15 "$out/test_varlen.log" | grep -v "^\s*$" | tail -n 8
  timeout 200 python3 -m benchmarks.learner_profile --compile "${PROFILE_COMPILE:-false}" > "$out/learner_profile.log" 2>&1
  echo "learner_profile rc=$?"; quiet 24 < "$out/learner_profile.log"
  timeout "${MFU_TIMEOUT:-300}" python3 -m benchmarks.learner_mfu --steps 3 ${MFU_RUNS:+--runs $MFU_RUNS} \
    > "$out/learner_mfu.log" 2>&1
  echo "learner_mfu rc=$?"; quiet 8 < "$out/learner_mfu.log"
  ;;
throughput)
  CUDA_VISIBLE_DEVICES=0 timeout 300 python3 -m benchmarks.rollout_throughput > "$out/rollout_throughput.log" 2>&1
  echo "rollout_throughput rc=$?"; quiet 6 < "$out/rollout_throughput.log"
  ;;
esac
find benchmarks/results -name '*.json' -newer "$out/.start" -exec cp {} "$out/" \;  # this run's results only

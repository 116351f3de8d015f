#!/usr/bin/env bash
# The GPU checks and benchmarks, one mode per machine shape; every result JSON records COMMIT.
#   COMMIT=$(git rev-parse --short HEAD) bash benchmarks/run_gpu_checks.sh one-gpu   # 1 GPU: varlen test,
#                                 rollout_throughput (interleaved), learner_mfu, learner_profile; each alone as
#                                 the modes varlen, throughput, mfu, profile (several modes may be given);
#                                 mismatch: PPO steps (policy + critic) with FSDP2 and ZeRO-3 on one GPU, and the
#                                 rollout-training mismatch on vLLM's sampled tokens (gpu_learner_check --gpus 1);
#                                 agent: the calculator agent through the gateway on a vLLM worker (gpu_agent_check)
#                                 mfu-variants: learner_mfu over RUNS (micro-batch and head chunk variants);
#                                 baseline-0.5b: rollout_throughput and learner_mfu on async_vs_sync's 0.5B setting
#                                 lora: LoRA against full fine-tuning on the 1.5B shape (sync bytes and time,
#                                 learner memory; lora_sync; needs peft staged)
#                                 lora-in-place: vLLM's LoRA slot written in place against its adapter reloaded
#                                 from a directory, each sync (lora_sync --variants lora,lora-reload)
#                                 lora-export: a LoRA learner's merged export and adapter directory sampled by vLLM
#                                 (tests/gpu/test_lora_gpu.py; needs peft staged)
#                                 weight-sync: sync.transport=ipc against a device copy of the same bytes (weight_sync)
#                                 colocate: recipes/gsm8k_grpo_1gpu.yaml, 5 steps, vLLM and learner taking turns
#                                 (random weights earn no reward: dynamic sampling would drop every group);
#                                 colocate-lora: the same with recipes/gsm8k_grpo_1gpu_lora.yaml (needs peft staged);
#                                 judge: the same recipe with a vLLM judge (the random model, 8-token verdicts) inside
#                                 the rollout worker's bundle: its busy time per step against generation's
#                                 bitwise-test: tests/gpu/test_bitwise_gpu.py (vLLM batch-invariant, learner log-probs equal)
#                                 bitwise-steps: its recipe steps alone, with the per-tensor checks after each sync
#                                 bitwise: benchmarks/performance/bitwise.py (that check, then the recipe normal vs bitwise)
#                                 profile-bitwise: learner_profile of one step, normal then bitwise (host syncs, kernels)
#                                 async: async_vs_sync --gpus 1, η = 0,1,2,4 once (vLLM and FSDP2 sharing the GPU);
#                                 async-reverse: the same with η = 4,2,1,0 (merge the two: async_vs_sync --merge);
#                                 async-mps, async-mps-reverse: the same under a CUDA MPS daemon started for the mode
#                                 ETAS=0,4 runs fewer η values (each run costs ~2 min of startup and steps);
#                                 ASYNC_OVERRIDES="key=value ..." adds config overrides to both η runs; SHAPE=1.5b
#                                 runs them on the 1.5B shape; STEPS and WARMUP (default 24 and 12: at η > 0 the
#                                 rollout's lead from the warm-up must run out first) set the window;
#                                 ENGINES=N: N vLLM engines share the GPU (placement.rollouts_per_gpu)
#                                 mfu-variants-0.5b: learner_mfu over RUNS on async_vs_sync's 0.5B batch
#                                 profile-0.5b: learner_profile of one step at async_vs_sync's 0.5B setting
#                                 busy-0.5b: each side's GPU busy fraction alone at that setting: learner_mfu
#                                 without and under a CUDA MPS daemon, rollout_throughput (raw vLLM and ours)
#                                 vs-trl: vs_trl_gpu, one repeat of SYSTEMS (default trl,rayrl-eta0,rayrl-eta4;
#                                 names in benchmarks/performance/vs_trl_gpu.py: TRL variants, rayrl ablations) on SHAPE;
#                                 vs-trl-reverse: the same, order reversed; vs-trl-mps, vs-trl-mps-reverse: under a
#                                 CUDA MPS daemon; STEPS, WARMUP and ASYNC_OVERRIDES as for async, LIMIT (s, 590)
#                                 (needs benchmarks/requirements-gpu-bench.txt staged beside the project's packages)
#                                 vision: a Qwen2.5-VL-3B-shaped policy with a picture in every prompt against a
#                                 text-only run of the same token counts, and the log-prob gap (vision_gpu);
#                                 KINDS=images runs one side, DTYPE=float32 runs vLLM, learner and sync in fp32
#                                 bf16-gap: how far bf16 numerics alone move that model's log-probs (bf16_gap)
#                                 teacher: distillation with a 1.5B-shaped vLLM teacher beside a 0.5B-shaped student
#                                 against the same run without it: the teacher's scoring tokens/s over the
#                                 generation's, its share of the step (teacher_gpu); KINDS=distill or rl: one half
#   COMMIT=... bash benchmarks/run_gpu_checks.sh two-gpu   # 2 GPUs: NCCL weight-sync check, learner vs vLLM
#                                 bf16 log-probs (pytest, ZeRO-3 xfail), gsm8k recipe 3 steps (recipe_run)
#   COMMIT=... bash benchmarks/run_gpu_checks.sh throughput-tp2   # 2 GPUs: rollout_throughput --tp 2
#   COMMIT=... bash benchmarks/run_gpu_checks.sh faults   # 2 GPUs: gsm8k recipe losing its vLLM rollout worker
#                                 and a reward actor mid-run (fault_check: restart, NCCL rejoin, ledger)
# COMMIT is the commit of the tree that runs (pass it in: a copied checkout's .git may lag behind).
# Full logs go to $OUT (or /tmp/gpu-out) with this run's result JSONs; a short summary is printed last.
set -uo pipefail
out=${OUT:-/tmp/gpu-out}; mkdir -p "$out"; touch "$out/.start"
commit=${COMMIT:?set COMMIT to the commit of the tree that runs}
quiet() { grep -v -E "INFO|WARNING|Warning|it/s\]|^\s*$" | tail -n "$1"; }
summary=()
keep_results() {  # this run's result files (not the checkout's older ones) into $out
  find benchmarks/results \( -name '*.json' -o -name '*.png' \) -newer "$out/.start" -exec cp {} "$out/" \;
}
step() {  # step NAME TIMEOUT_S command...: run it, log to $out/NAME.log, remember its exit code
  local name=$1 limit=$2; shift 2
  (while sleep 10; do keep_results; done) & local keeper=$!  # partial JSONs reach $out even if the call is cut off
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  kill "$keeper" 2>/dev/null
  summary+=("$name rc=$rc")
  keep_results
  echo "== $name rc=$rc"; quiet 8 < "$out/$name.log"
}

fixtures() {  # a Qwen2-1.5B-shaped model with random weights and synthetic GSM8K, under $work
  work=$(mktemp -d)
  python3 -c "
from rayrl.data.gsm8k import write_synthetic_gsm8k
from rayrl.testing.random_qwen2 import QWEN2_1_5B_SHAPE, save_random_qwen2
from rayrl.models.tokenizer import TEXT_CHARS
shape = {k: v for k, v in QWEN2_1_5B_SHAPE.items() if k != 'vocab_size'}
save_random_qwen2('$work/model', chars=TEXT_CHARS, **shape)
write_synthetic_gsm8k('$work/gsm8k.jsonl', 512)
" > "$out/fixtures.log" 2>&1 || { echo "fixtures failed"; tail -20 "$out/fixtures.log"; }
}

# CUDA MPS for the async-mps modes: one control daemon for this mode's processes (their kernels then share the GPU
# at once instead of taking turns by time slice); its pipe and log directories under /tmp, quit when the mode ends
mps_start() {
  command -v nvidia-cuda-mps-control > /dev/null || { echo "== mps: no nvidia-cuda-mps-control on this machine"; return 1; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "== mps: the control daemon did not start"; return 1; }
}
mps_stop() {
  echo "== mps servers: $(echo get_server_list | nvidia-cuda-mps-control | tr '\n' ' ')"
  echo quit | nvidia-cuda-mps-control
  cp "$CUDA_MPS_LOG_DIRECTORY/control.log" "$out/mps_control.log" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

run_mode() {
  case "$1" in
  varlen) CUDA_VISIBLE_DEVICES=0 step test_varlen_attention 150 python3 -m pytest -q -m gpu tests/gpu/test_varlen_attention.py ;;
  throughput) CUDA_VISIBLE_DEVICES=0 step rollout_throughput 400 python3 -m benchmarks.performance.rollout_throughput --commit "$commit" ;;
  mfu) CUDA_VISIBLE_DEVICES=0 step learner_mfu 300 python3 -m benchmarks.performance.learner_mfu --commit "$commit" --steps 3 ;;
  mfu-variants) CUDA_VISIBLE_DEVICES=0 step learner_mfu 400 python3 -m benchmarks.performance.learner_mfu --commit "$commit" \
    --steps 3 --runs "${RUNS:-fsdp:packed:16384:compile,fsdp:packed:32768:compile:learner.logprob_chunk_tokens=8192}" ;;
  mfu-variants-0.5b) CUDA_VISIBLE_DEVICES=0 step learner_mfu 400 python3 -m benchmarks.performance.learner_mfu --commit "$commit" \
    --steps 3 --shape 0.5b --completion 128 --groups 32 --runs "${RUNS:-fsdp:packed:16384:compile,\
fsdp:packed:24576:compile:learner.logprob_chunk_tokens=24576,fsdp:packed:49152:compile:learner.logprob_chunk_tokens=8192}" ;;
  lora-export) CUDA_VISIBLE_DEVICES=0 step test_lora_gpu 400 python3 -m pytest -q -s -m gpu tests/gpu/test_lora_gpu.py -rxX ;;
  lora) CUDA_VISIBLE_DEVICES=0 step lora_sync 580 python3 -m benchmarks.performance.lora_sync --commit "$commit" --variants full,lora ;;
  lora-in-place) CUDA_VISIBLE_DEVICES=0 step lora_sync 500 python3 -m benchmarks.performance.lora_sync --commit "$commit" \
    --variants lora,lora-reload --steps 2 --hot 10 ;;
  baseline-0.5b)  # async_vs_sync's one-GPU shape alone: raw vLLM at its memory share, the learner at its lengths
    CUDA_VISIBLE_DEVICES=0 step rollout_throughput 300 python3 -m benchmarks.performance.rollout_throughput --commit "$commit" \
      --shape 0.5b --prompts 256 --max-tokens 128 --memory-share 0.3 --kv-cache-gb 8 --repeats 5
    CUDA_VISIBLE_DEVICES=0 step learner_mfu 300 python3 -m benchmarks.performance.learner_mfu --commit "$commit" --steps 3 \
      --shape 0.5b --completion 128 --groups 32 --runs fsdp:packed:49152:compile:learner.logprob_chunk_tokens=8192 ;;
  busy-0.5b)  # what each side keeps the GPU busy alone (NVML), the learner with and without MPS
    for mps in "" -mps; do
      [ -n "$mps" ] && { mps_start || return; }
      CUDA_VISIBLE_DEVICES=0 step "learner_mfu$mps" 200 python3 -m benchmarks.performance.learner_mfu --commit "$commit" --steps 8 \
        --shape 0.5b --completion 128 --groups 32 --runs fsdp:packed:49152:compile:learner.logprob_chunk_tokens=8192
      [ -n "$mps" ] && mps_stop
    done
    CUDA_VISIBLE_DEVICES=0 step rollout_throughput 240 python3 -m benchmarks.performance.rollout_throughput --commit "$commit" \
      --shape 0.5b --prompts 256 --max-tokens 128 --memory-share 0.3 --kv-cache-gb 8 --repeats 3 ;;
  profile) CUDA_VISIBLE_DEVICES=0 step learner_profile 200 python3 -m benchmarks.performance.learner_profile --commit "$commit" --compile true ;;
  profile-0.5b)  # the learner's step alone at async_vs_sync's 0.5B setting: what keeps the GPU idle in it
    CUDA_VISIBLE_DEVICES=0 step learner_profile 240 python3 -m benchmarks.performance.learner_profile --commit "$commit" \
      --shape 0.5b --groups 32 --completion 128 --tokens 49152 --compile true learner.logprob_chunk_tokens=8192 ;;
  profile-bitwise)  # the learner's step, normal and bitwise, at the bitwise benchmark's recipe settings
    for mode in "" --bitwise; do
      CUDA_VISIBLE_DEVICES=0 step "learner_profile${mode:+_bitwise}" 240 python3 -m benchmarks.performance.learner_profile \
        --commit "$commit" --tokens 8192 $mode learner.activation_checkpointing=true algorithm.beta=0.1 \
        rollout.temperature=0.7
    done ;;
  mismatch) CUDA_VISIBLE_DEVICES=0 step gpu_learner_check 600 python3 tests/gpu/learner_check.py --commit "$commit" --gpus 1 ;;
  one-gpu) for m in varlen throughput mfu profile; do run_mode "$m"; done ;;
  agent) CUDA_VISIBLE_DEVICES=0 step gpu_agent_check 400 python3 tests/gpu/agent_check.py --commit "$commit" ;;
  weight-sync) CUDA_VISIBLE_DEVICES=0 step weight_sync 420 python3 -m benchmarks.performance.weight_sync --commit "$commit" --transport ipc ;;
  bitwise-test) CUDA_VISIBLE_DEVICES=0 step test_bitwise 580 python3 -m pytest -q -s -m gpu tests/gpu/test_bitwise_gpu.py -rxX ;;
  bitwise-steps) CUDA_VISIBLE_DEVICES=0 step test_bitwise_steps 400 python3 -m pytest -q -s -m gpu \
    tests/gpu/test_bitwise_gpu.py -k every_training_step -rxX ;;
  bitwise) CUDA_VISIBLE_DEVICES=0 step bitwise 580 python3 -m benchmarks.performance.bitwise --commit "$commit" ;;
  async|async-reverse|async-mps|async-mps-reverse)
    order=(); [ "${1%-reverse}" != "$1" ] && order=(--reverse-first)
    [ "${1#async-mps}" != "$1" ] && { mps_start || return; }
    CUDA_VISIBLE_DEVICES=0 step "async_vs_sync${1#async}" 580 python3 -m benchmarks.performance.async_vs_sync --commit "$commit" \
      --gpus 1 --shape "${SHAPE:-0.5b}" --engines "${ENGINES:-1}" --repeats 1 --steps "${STEPS:-24}" \
      --warmup "${WARMUP:-12}" --etas "${ETAS:-0,1,2,4}" "${order[@]}" metrics.run_dir=/tmp/async-runs ${ASYNC_OVERRIDES:-}
    [ "${1#async-mps}" != "$1" ] && mps_stop
    ;;
  vs-trl|vs-trl-reverse|vs-trl-mps|vs-trl-mps-reverse)
    order=(); [ "${1%-reverse}" != "$1" ] && order=(--reverse-first)
    [ "${1#vs-trl-mps}" != "$1" ] && { mps_start || return; }
    CUDA_VISIBLE_DEVICES=0 step "vs_trl_gpu${1#vs-trl}" "${LIMIT:-590}" python3 -m benchmarks.performance.vs_trl_gpu \
      --commit "$commit" --shape "${SHAPE:-0.5b}" --repeats 1 --steps "${STEPS:-24}" --warmup "${WARMUP:-12}" \
      --systems "${SYSTEMS:-trl,rayrl-eta0,rayrl-eta4}" "${order[@]}" metrics.run_dir=/tmp/vs-trl-runs \
      ${ASYNC_OVERRIDES:-}
    [ "${1#vs-trl-mps}" != "$1" ] && mps_stop
    ;;
  colocate|colocate-lora)
    fixtures
    recipe=recipes/gsm8k_grpo_1gpu.yaml; [ "$1" = colocate-lora ] && recipe=recipes/gsm8k_grpo_1gpu_lora.yaml
    CUDA_VISIBLE_DEVICES=0 step "gsm8k_1gpu${1#colocate}" 480 python3 -m benchmarks.performance.recipe_run --commit "$commit" \
      --config "$recipe" model.path="$work/model" data.path="$work/gsm8k.jsonl" learner.total_steps=5 \
      learner.lr_warmup_steps=0 rollout.batch_size=16 data.eval_size=32 vllm.enforce_eager=true \
      algorithm.dynamic_sampling=false \
      scheduler.include_dashboard=false metrics.run_dir=/tmp/gpu-runs metrics.run_name="gsm8k-1gpu${1#colocate}" metrics.progress=false
    ;;
  judge)
    fixtures
    CUDA_VISIBLE_DEVICES=0 step judge_1gpu 480 python3 -m benchmarks.performance.recipe_run --commit "$commit" --name recipe_judge_1gpu \
      --config recipes/gsm8k_grpo_1gpu.yaml model.path="$work/model" data.path="$work/gsm8k.jsonl" learner.total_steps=5 \
      learner.lr_warmup_steps=0 rollout.batch_size=16 data.eval_size=32 vllm.enforce_eager=true \
      algorithm.dynamic_sampling=false reward.model.kind=judge reward.model.path="$work/model" reward.model.engine=vllm \
      reward.model.placement=rollout reward.model.gpu_fraction=0.1 reward.model.gpu_memory_utilization=0.15 \
      reward.model.max_new_tokens=8 reward.model.parser=benchmarks.performance.timing_verdicts:verdict_length \
      scheduler.include_dashboard=false metrics.run_dir=/tmp/gpu-runs metrics.run_name=judge-1gpu metrics.progress=false
    ;;
  two-gpu)
    step gpu_rollout_check 330 python3 tests/gpu/rollout_check.py --commit "$commit"
    step test_learner_gpu 600 python3 -m pytest -q -m gpu tests/gpu/test_learner_gpu.py -rxX
    fixtures
    step gsm8k_recipe 330 python3 -m benchmarks.performance.recipe_run --commit "$commit" --config recipes/gsm8k_grpo.yaml \
      model.path="$work/model" data.path="$work/gsm8k.jsonl" learner.total_steps=3 rollout.batch_size=16 \
      data.eval_size=32 vllm.enforce_eager=true scheduler.include_dashboard=false metrics.run_dir=/tmp/gpu-runs \
      metrics.run_name=gsm8k-3 metrics.progress=false
    ;;
  faults)
    fixtures
    step fault_check 480 python3 tests/gpu/fault_check.py --commit "$commit" --config recipes/gsm8k_grpo.yaml \
      model.path="$work/model" data.path="$work/gsm8k.jsonl" rollout.batch_size=16 data.eval_size=32 \
      vllm.enforce_eager=true metrics.run_dir=/tmp/gpu-runs metrics.progress=false checkpoint.save_final=false
    ;;
  vision) CUDA_VISIBLE_DEVICES=0 step vision_gpu "${LIMIT:-480}" python3 -m benchmarks.performance.vision_gpu --commit "$commit" \
    --steps "${STEPS:-8}" --warmup "${WARMUP:-3}" --kinds "${KINDS:-images,text}" --dtype "${DTYPE:-bfloat16}" ;;
  teacher) CUDA_VISIBLE_DEVICES=0 step teacher_gpu "${LIMIT:-540}" python3 -m benchmarks.performance.teacher_gpu --commit "$commit" \
    --steps "${STEPS:-8}" --warmup "${WARMUP:-3}" --kinds "${KINDS:-distill,rl}" ;;
  bf16-gap) CUDA_VISIBLE_DEVICES=0 step bf16_gap "${LIMIT:-300}" python3 -m benchmarks.performance.bf16_gap --commit "$commit" ;;
  throughput-tp2) step rollout_throughput_tp2 400 python3 -m benchmarks.performance.rollout_throughput --commit "$commit" --tp 2 ;;
  *) echo "unknown mode $1: varlen, throughput, mfu, profile, one-gpu, mismatch, agent, weight-sync, colocate, lora, lora-in-place, lora-export, judge, bitwise-test, bitwise-steps, bitwise, profile-bitwise, vs-trl, vs-trl-reverse, vs-trl-mps, vs-trl-mps-reverse, vision, teacher, bf16-gap, two-gpu, throughput-tp2 or faults"; exit 2 ;;
  esac
}

[ $# -gt 0 ] || { echo "usage: COMMIT=... $0 MODE [MODE ...]"; exit 2; }
for mode in "$@"; do run_mode "$mode"; done
printf '%s\n' "${summary[@]}"

"""TRL's GRPOTrainer on one GPU as its users run it there: vLLM in colocate mode (one process, vLLM beside the
trainer on the same GPU, CUDA graphs on), bf16 autocast over fp32 weights, gradient accumulation to the batch.
vs_trl --gpus 1 runs this in a child process (vLLM's memory leaves with it) and reads one result line.

    python -m benchmarks.trl_gpu MODEL_DIR SETTINGS_JSON     (prints "TRL_RESULT {json}")

SETTINGS_JSON: steps, prompts, group_size, max_new_tokens, micro_batch, memory_share, lr, max_model_len (bf16:
false only to smoke-test the script on a CPU with vLLM's CPU build).
Every completion runs to max_new_tokens (ignore_eos through vLLM's sampling parameters), as on rayrl's side.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

MARKER = "TRL_RESULT "


def run(model_dir: str, s: dict) -> dict:
    import pyarrow as pa
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rayrl.config import DataConfig
    from rayrl.data import load_tasks
    from rayrl.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    tasks = load_tasks(DataConfig())[0]
    rows = [{"prompt": tokenizer.bos_token + t.prompt} for t in tasks]
    samples = s["prompts"] * s["group_size"]
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), max_steps=s["steps"], per_device_train_batch_size=s["micro_batch"],
        gradient_accumulation_steps=samples // s["micro_batch"], num_generations=s["group_size"],
        max_completion_length=s["max_new_tokens"], temperature=1.0, learning_rate=s["lr"], lr_scheduler_type="constant",
        beta=0.0, loss_type="dapo", scale_rewards="group", bf16=s.get("bf16", True), gradient_checkpointing=False,
        use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=s["memory_share"],
        vllm_max_model_length=s["max_model_len"], generation_kwargs={"ignore_eos": True},
        report_to=[], save_strategy="no", logging_steps=s["steps"], disable_tqdm=True, seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, *_, **__):
            ends.append(time.time())

        def on_step_end(self, *_, **__):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            ends.append(time.time())

    def reward(completions, **_):  # random weights earn nothing; the reward's cost is not what is compared
        return [0.0 for _ in completions]

    # a fingerprint given: datasets would otherwise hash its own state with dill, which raised PicklingError
    # ("Can't pickle <class 'MonthDayNano'>") on the GPU machine's Python 3.12 and pyarrow
    prompts = Dataset(pa.Table.from_pylist(rows), fingerprint="vs-trl-gpu-prompts")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=prompts,
                          processing_class=tokenizer, callbacks=[Clock()])
    trainer.train()
    return {"step_ends": ends, "samples_per_step": samples,
            "gradient_accumulation_steps": args.gradient_accumulation_steps}


def main() -> None:
    result = run(sys.argv[1], json.loads(sys.argv[2]))
    print(MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

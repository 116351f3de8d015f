"""TRL's GRPOTrainer on one GPU as its users run it there: vLLM in colocate mode (one process, vLLM beside the
trainer on the same GPU, CUDA graphs on), bf16 autocast over fp32 weights, gradient accumulation to the batch.
vs_trl_gpu runs this in a child process (vLLM's memory leaves with it) and reads one result line.

    python -m benchmarks.performance.trl_gpu MODEL_DIR SETTINGS_JSON     (prints "TRL_RESULT {json}")

SETTINGS_JSON: steps, prompts, group_size, max_new_tokens, lr, max_model_len and a variant's settings (variant()):
micro_batch, memory_share, detokenize, liger, compile, is_correction, generation_batch_size (bf16: false on a CPU,
where TRL's weight sync into vLLM's CPU build 0.27.1 fails in vLLM's loader: 'Parameter' has no weight_loader).
Every completion runs to max_new_tokens (ignore_eos through vLLM's sampling parameters), as on rayrl's side.
Each step's end and each call of TRL's phases (generation, weight sync, its whole rollout: generation, rewards
and the no-grad log-prob pass) is timed and returned.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from benchmarks.common import prompt_dataset

MARKER = "TRL_RESULT "

# TRL tuned as its users tune it (TRL's docs on reducing memory and speeding up training): vLLM's memory share sized
# to the batch (its KV cache for 256 x 512 tokens is under 4 GB on both shapes: 0.1 of an H200 is 14 GB), vLLM does
# not detokenize what TRL decodes again itself, the importance-sampling correction on (TRL's default)
TUNED = {"micro_batch": 64, "memory_share": 0.1, "detokenize": False, "liger": False, "compile": False,
         "is_correction": True, "generation_batch_size": None}


def variant(name: str) -> dict:
    """A TRL system's name as its settings over TUNED: 'trl-mb128-liger' ... Parts: mbN (per-device micro-batch),
    memX (vLLM's memory share), detok (vLLM detokenizes), liger (use_liger_kernel), compile (torch_compile),
    nois (no importance-sampling correction: TRL's ceiling, not its default), gbsN (generation_batch_size N: one
    generation feeds N / 256 optimizer steps, TRL's off-policy mode)."""
    if not name.startswith("trl"):
        raise ValueError(f"a TRL system's name starts with 'trl', got {name!r}")
    out = dict(TUNED)
    flags = {"detok": ("detokenize", True), "liger": ("liger", True), "compile": ("compile", True),
             "nois": ("is_correction", False)}
    for part in filter(None, name.removeprefix("trl").split("-")):
        if part in flags:
            out[flags[part][0]] = flags[part][1]
        elif part.startswith("mb") and part[2:].isdigit():
            out["micro_batch"] = int(part[2:])
        elif part.startswith("gbs") and part[3:].isdigit():
            out["generation_batch_size"] = int(part[3:])
        elif part.startswith("mem"):
            out["memory_share"] = float(part[3:])
        else:
            raise ValueError(f"unknown part {part!r} of TRL system {name!r}: expected mbN, memX, gbsN, detok, liger, "
                             "compile or nois")
    return out


def colocate_args(v: dict, samples: int, max_model_len: int, sampling: dict | None = None) -> dict:
    """GRPOConfig's arguments for a variant's settings: vLLM colocate, micro-batches accumulated to `samples`."""
    return dict(per_device_train_batch_size=v["micro_batch"], gradient_accumulation_steps=samples // v["micro_batch"],
                generation_batch_size=v["generation_batch_size"], use_vllm=True, vllm_mode="colocate",
                vllm_gpu_memory_utilization=v["memory_share"], vllm_max_model_length=max_model_len,
                generation_kwargs={**(sampling or {}), **({} if v["detokenize"] else {"detokenize": False})},
                vllm_importance_sampling_correction=v["is_correction"], use_liger_kernel=v["liger"],
                torch_compile=v["compile"])


def versions() -> dict:
    """The versions of what both sides run on (recorded beside every result)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("trl", "vllm", "transformers", "torch", "liger-kernel", "ray", "accelerate"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _timed(fn, calls: list, sync):
    """fn, recording each call's (start, end) after the device has finished its work."""
    def call(*args, **kwargs):
        start = time.time()
        out = fn(*args, **kwargs)
        sync()
        calls.append((start, time.time()))
        return out
    return call


def run(model_dir: str, s: dict) -> dict:
    import torch
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
        output_dir=tempfile.mkdtemp(), max_steps=s["steps"], num_generations=s["group_size"],
        max_completion_length=s["max_new_tokens"], temperature=1.0, learning_rate=s["lr"], lr_scheduler_type="constant",
        beta=0.0, loss_type="dapo", scale_rewards="group", bf16=s.get("bf16", True), gradient_checkpointing=False,
        report_to=[], save_strategy="no", logging_steps=s["steps"], disable_tqdm=True, seed=0,
        **colocate_args(s, samples, s["max_model_len"], {"ignore_eos": True}))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    ends: list[float] = []
    phases: dict[str, list] = {"generate": [], "sync_weights": [], "rollout": []}

    class Clock(TrainerCallback):
        def on_train_begin(self, *_, **__):
            ends.append(time.time())

        def on_step_end(self, *_, **__):
            sync()
            ends.append(time.time())

    def reward(completions, **_):  # random weights earn nothing; the reward's cost is not what is compared
        return [0.0 for _ in completions]

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=prompt_dataset(rows, "vs-trl-gpu-prompts"),
                          processing_class=tokenizer, callbacks=[Clock()])
    engine = trainer.vllm_generation  # its phases timed from outside: TRL's code is not changed
    engine.generate = _timed(engine.generate, phases["generate"], sync)
    engine.sync_weights = _timed(engine.sync_weights, phases["sync_weights"], sync)
    trainer._generate_and_score_completions = _timed(trainer._generate_and_score_completions, phases["rollout"], sync)
    trainer.train()
    return {"step_ends": ends, "samples_per_step": samples, "phases": phases, "versions": versions(),
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "steps_per_generation": args.steps_per_generation}


def main() -> None:
    result = run(sys.argv[1], json.loads(sys.argv[2]))
    print(MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

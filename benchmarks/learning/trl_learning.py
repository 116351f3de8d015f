"""TRL's GRPOTrainer learning the arithmetic task, for vs_trl's time to accuracy: on CPU with PyTorch's generate,
on one GPU with vLLM colocate in a named variant's settings (benchmarks.performance.trl_gpu.variant). Held-out greedy accuracy
every eval_every steps on the training clock, the evaluation paused out of it; on the GPU it runs on TRL's own vLLM
engine after a weight sync, as rayrl evaluates on its vLLM engines (bf16, greedy)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import prompt_dataset
from benchmarks.performance.trl_gpu import colocate_args, variant
from rayrl.config import Config
from rayrl.data import load_tasks
from rayrl.models.tokenizer import load_tokenizer
from rayrl.rewards.arithmetic import exact_match
from rayrl.types import Sample, Task


def _correct(text: str, ended: bool, task: Task) -> float:
    """The recipe's own reward (rayrl.rewards.arithmetic.exact_match) on a completion's text."""
    sample = Sample("", [], [], [], [], "stop" if ended else "length", text=text)
    return exact_match(sample, task).reward


def _score(rows: list[list[int]], tasks: list[Task], tokenizer) -> float:
    """Share of completions (token ids) that stop cleanly with the right answer."""
    hits = 0.0
    for row, task in zip(rows, tasks):
        ended = tokenizer.eos_token_id in row
        row = row[: row.index(tokenizer.eos_token_id)] if ended else row
        hits += _correct(tokenizer.decode(row, skip_special_tokens=True), ended, task)
    return hits / len(tasks)


def _prompt_ids(tokenizer, tasks: list[Task]) -> list[list[int]]:
    return [[tokenizer.bos_token_id, *tokenizer.encode(t.prompt, add_special_tokens=False)] for t in tasks]


def greedy_accuracy(model, tokenizer, tasks, max_new_tokens: int) -> float:
    """Held-out exact match with greedy decoding through PyTorch's generate (rayrl's evaluation: a clean stop and
    the right integer)."""
    prompts = _prompt_ids(tokenizer, tasks)
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)[:, width:]
    return _score(out.tolist(), tasks, tokenizer)


def vllm_greedy_accuracy(trainer, tokenizer, tasks, max_new_tokens: int) -> float:
    """The same on TRL's colocated vLLM engine, its weights synced to the trainer's first."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine = trainer.vllm_generation
    engine.sync_weights()
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=[tokenizer.eos_token_id])
    outs = engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in _prompt_ids(tokenizer, tasks)], params,
                               use_tqdm=False)
    return _score([list(o.outputs[0].token_ids) for o in outs], tasks, tokenizer)


def run_trl(cfg: Config, hp: dict, model_path: Path, steps: int, eval_every: int, system: str = "trl") -> dict:
    """TRL on the config's task: on CPU as its users run it there; with cfg.on_gpu, vLLM colocate in the settings
    the system's name gives. Returns the accuracy curve against training wall time."""
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    gpu = cfg.on_gpu
    if not gpu:
        torch.set_num_threads(2)
    tokenizer = load_tokenizer(str(model_path))
    train_tasks, eval_tasks = load_tasks(cfg.data)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    rows = [{"prompt": tokenizer.bos_token + t.prompt, "task": t.id} for t in train_tasks]
    by_id = {t.id: t for t in train_tasks}
    batch = hp["prompts_per_step"] * hp["group_size"]

    def reward(completions, completion_ids, task, **_):
        return [_correct(c, bool(ids) and ids[-1] == tokenizer.eos_token_id, by_id[t])
                for c, ids, t in zip(completions, completion_ids, task)]

    if gpu:
        device = dict(bf16=True, **colocate_args(variant(system), batch, cfg.vllm.max_model_len))
    else:
        device = dict(per_device_train_batch_size=batch, use_cpu=True, bf16=False)
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=steps, num_generations=hp["group_size"],
                      max_completion_length=hp["max_new_tokens"], temperature=hp["temperature"], learning_rate=hp["lr"],
                      lr_scheduler_type="constant", warmup_steps=hp["warmup_steps"], max_grad_norm=hp["grad_clip"],
                      weight_decay=hp["weight_decay"], beta=hp["beta"], epsilon=hp["clip"][0],
                      epsilon_high=hp["clip"][1], loss_type="dapo", scale_rewards="group", seed=hp["seed"],
                      report_to=[], save_strategy="no", logging_steps=steps, disable_tqdm=True,
                      gradient_checkpointing=hp["activation_checkpointing"], **device)
    curve, clock, box = [], {"train": 0.0, "since": 0.0}, {}

    def accuracy() -> float:
        if gpu:
            return vllm_greedy_accuracy(box["trainer"], tokenizer, eval_tasks, hp["max_new_tokens"])
        return greedy_accuracy(model, tokenizer, eval_tasks, hp["max_new_tokens"])

    class HeldOut(TrainerCallback):
        """Accuracy every eval_every steps on the training clock (evaluation paused out of it)."""

        def on_train_begin(self, *_, **__):
            curve.append((0.0, accuracy()))
            clock["since"] = time.perf_counter()

        def on_step_end(self, _args, state, *_, **__):
            if state.global_step % eval_every == 0 or state.global_step == steps:
                if gpu:
                    torch.cuda.synchronize()
                clock["train"] += time.perf_counter() - clock["since"]
                curve.append((clock["train"], accuracy()))
                clock["since"] = time.perf_counter()

    box["trainer"] = trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args,
                                           train_dataset=prompt_dataset(rows, "vs-trl-prompts"),
                                           processing_class=tokenizer,
                                           callbacks=[HeldOut()])
    trainer.train()
    return {"system": system, "curve": curve, "wall_s": clock["train"], "samples_per_s": steps * batch / clock["train"],
            "step_s": clock["train"] / steps}


MARKER = "TRL_LEARNING "


def run_trl_child(recipe: str, overrides: list[str], hp: dict, model_path: Path, steps: int, eval_every: int,
                  system: str, timeout_s: float = 3600) -> dict:
    """run_trl in a child process without Ray's environment (on a GPU: vLLM's memory leaves with it)."""
    import json

    from benchmarks.common import run_outside_ray

    job = {"recipe": recipe, "overrides": overrides, "hp": hp, "model": str(model_path), "steps": steps,
           "eval_every": eval_every, "system": system}
    script = "import sys; from benchmarks.learning.trl_learning import main; main(sys.argv[1])"
    return json.loads(run_outside_ray(script, [json.dumps(job)], MARKER, timeout_s))


def main(job_json: str) -> None:
    import json

    from rayrl.config import load_config

    job = json.loads(job_json)
    cfg = load_config(job["recipe"], job["overrides"])
    out = run_trl(cfg, job["hp"], Path(job["model"]), job["steps"], job["eval_every"], job["system"])
    print(MARKER + json.dumps(out), flush=True)

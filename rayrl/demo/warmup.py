"""A short supervised warm-up so RL starts from a policy that succeeds some of the time."""

from __future__ import annotations

import random

import torch

from rayrl.config import DemoConfig
from rayrl.types import Task


Row = tuple[list[int], list[int]]  # token ids and labels (-100 where nothing is learned)
# a vision-language row adds its image inputs and the model's image kwargs maker (rayrl.demo.vision_policy)


def task_rows(tokenizer, tasks: list[Task]) -> list[Row]:
    """BOS+prompt+answer+EOS, labels on the answer and EOS only."""
    rows = []
    for t in tasks:
        p = [tokenizer.bos_token_id, *tokenizer.encode(t.prompt, add_special_tokens=False)]
        a = [*tokenizer.encode(t.answer, add_special_tokens=False), tokenizer.eos_token_id]
        rows.append((p + a, [-100] * len(p) + a))
    return rows


def chat_rows(tokenizer, conversations: list[list[dict]], tools: list[dict] | None = None) -> list[Row]:
    """Each conversation through the chat template, labels on the assistant turns only (what the
    policy samples; the template's markup up to each turn and tool results are context)."""
    rows = []
    for messages in conversations:
        ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        full = tokenizer.encode(ids, add_special_tokens=False)
        labels = [-100] * len(full)
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            start = len(tokenizer.encode(tokenizer.apply_chat_template(messages[:i], tools=tools, tokenize=False,
                                                                       add_generation_prompt=True), add_special_tokens=False))
            end = len(tokenizer.encode(tokenizer.apply_chat_template(messages[:i + 1], tools=tools, tokenize=False),
                                       add_special_tokens=False))
            labels[start:end] = full[start:end]
        rows.append((full, labels))
    return rows


def _batch(pad_id: int, rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and labels."""
    width = max(len(r) for r, _ in rows)
    ids = torch.full((len(rows), width), pad_id)
    lab = torch.full((len(rows), width), -100)
    for i, (r, l) in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
    return ids, lab


def supervised_warmup(model, tokenizer, tasks: list[Task] | list[Row], cfg: DemoConfig, images=None) -> list[float]:
    """cfg.warmup_steps of next-token cross-entropy on answers (tasks) or labelled rows on cfg.device (fp32
    weights; bf16 autocast on CUDA); the model comes back on the CPU. Returns the loss curve. images(indices, ids):
    a vision-language model's image kwargs for those rows (in the order sampled)."""
    rows = task_rows(tokenizer, tasks) if tasks and isinstance(tasks[0], Task) else tasks
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("demo.device=cuda, but this process sees no CUDA device; set demo.device=cpu")
    rng = random.Random(cfg.seed)
    model.to(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr)
    model.train()
    losses = []
    for _ in range(cfg.warmup_steps):
        picked = rng.sample(range(len(rows)), min(cfg.warmup_batch_size, len(rows)))
        ids, lab = (t.to(cfg.device) for t in _batch(tokenizer.pad_token_id, [rows[i] for i in picked]))
        extra = {} if images is None else {k: v.to(cfg.device) for k, v in images(picked, ids.cpu()).items()}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.device == "cuda"):
            loss = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), labels=lab,
                         **extra).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    model.to("cpu")
    if cfg.device == "cuda":
        torch.cuda.empty_cache()  # the engines and the learner that start next get the memory back
    return losses

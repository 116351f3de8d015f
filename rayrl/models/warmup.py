"""A short supervised warm-up so RL starts from a policy that succeeds some of the time."""

from __future__ import annotations

import random

import torch

from rayrl.config import ModelBuildConfig
from rayrl.types import Task


def _batch(tokenizer, tasks: list[Task]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded BOS+prompt+answer+EOS rows and labels that score only the answer and EOS."""
    rows, labels = [], []
    for t in tasks:
        p = [tokenizer.bos_token_id, *tokenizer.encode(t.prompt, add_special_tokens=False)]
        a = [*tokenizer.encode(t.answer, add_special_tokens=False), tokenizer.eos_token_id]
        rows.append(p + a)
        labels.append([-100] * len(p) + a)
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    lab = torch.full((len(rows), width), -100)
    for i, (r, l) in enumerate(zip(rows, labels)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
    return ids, lab


def supervised_warmup(model, tokenizer, tasks: list[Task], cfg: ModelBuildConfig) -> list[float]:
    """cfg.warmup_steps of next-token cross-entropy on answers; returns the loss curve."""
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr)
    model.train()
    losses = []
    for _ in range(cfg.warmup_steps):
        ids, lab = _batch(tokenizer, rng.sample(tasks, min(cfg.warmup_batch_size, len(tasks))))
        loss = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), labels=lab).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses

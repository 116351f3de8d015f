"""The demo reward models for the arithmetic task, built offline like the demo policy: a small Qwen2 judge
(answers "y" or "n" to the template's question) or scorer (a one-label head), trained on synthetic verdicts:
each training problem with its right answer and with a wrong one (off by a little or a lot, truncated, with
trailing junk), rendered through reward.model.template. Cached by a hash of everything that shapes it."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

import torch
import transformers
from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification

from rayrl.config import DataConfig, DemoConfig, RewardModelConfig
from rayrl.data.arithmetic import split
from rayrl.engines.reward.base import render
from rayrl.demo.policy import qwen2_config, save_built
from rayrl.models.tokenizer import build_char_tokenizer
from rayrl.demo.warmup import supervised_warmup
from rayrl.types import ScoreRequest, Task

log = logging.getLogger(__name__)
VERDICTS = {True: "y", False: "n"}
EXAMPLES_VERSION = 3  # in the cache key: raise it when verdict_examples or wrong_answer change


def wrong_answer(answer: str, rng: random.Random) -> str:
    """A plausible wrong answer, mostly the policy's own kind of mistake (one digit off), else off by a little,
    random, reversed, truncated, empty, or with something before or after it (a policy trained by a judge finds
    any answer the judge was never shown a "no" for: before empty answers were among these, one learned to
    answer nothing)."""
    n, i = int(answer), rng.randrange(len(answer))
    one_digit = answer[:i] + rng.choice([d for d in "0123456789" if d != answer[i]]) + answer[i + 1:]
    far = str(rng.randint(0, 99))
    kinds = [one_digit, one_digit, one_digit, far, far, far, str(n + rng.choice([-2, -1, 1, 2])),
             answer + rng.choice("0123456789"), answer[:-1], answer[1:], "", answer[::-1], answer + " " + answer,
             "=" + answer, "-" + answer]
    out = rng.choice(kinds)
    return out if out != answer else str(n + 1)


def verdict_examples(tasks: list[Task], seed: int) -> list[tuple[ScoreRequest, bool]]:
    """Each task once with its right answer and once with a wrong one."""
    rng = random.Random(seed)
    out = []
    for t in tasks:
        out.append((ScoreRequest(t.prompt, t.answer, t.answer), True))
        out.append((ScoreRequest(t.prompt, wrong_answer(t.answer, rng), t.answer), False))
    return out


def build_reward_model(section: RewardModelConfig, demo: DemoConfig, data: DataConfig) -> Path:
    """reward.model.path if given, else the demo judge or scorer for the arithmetic task (cached)."""
    if section.path is not None:
        path = Path(section.path).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"reward.model.path '{section.path}' has no config.json; give a local Hugging "
                                    "Face model directory or leave it unset (the demo judge, arithmetic only)")
        return path
    if data.task != "arithmetic":
        raise ValueError(f"reward.model.path is unset: the demo {section.kind} is built for data.task=arithmetic "
                         f"only, got {data.task}")
    key = {"demo": demo.model_dump(exclude={"cache_dir"}), "data": data.model_dump(), "kind": section.kind,
           "examples": EXAMPLES_VERSION,
           "template": section.template, "transformers": transformers.__version__, "torch": torch.__version__}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    out = Path(demo.cache_dir).expanduser() / f"qwen2-{section.kind}-{digest}"
    if (out / "config.json").is_file():
        return out
    tokenizer = build_char_tokenizer()
    train, held_out = split(data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same bits on every machine for the same config
    try:
        torch.manual_seed(demo.seed)
        model = _train(section, demo, tokenizer, verdict_examples(train, demo.seed))
        log.info("demo %s: %.3f of held-out verdicts right", section.kind,
                 verdict_accuracy(model, tokenizer, section, verdict_examples(held_out, demo.seed + 1)))
    finally:
        torch.set_num_threads(threads)
    return save_built(model, tokenizer, out)


def _ids(tokenizer, section: RewardModelConfig, request: ScoreRequest) -> list[int]:
    return [tokenizer.bos_token_id, *tokenizer.encode(render(section.template, request), add_special_tokens=False)]


def _train(section: RewardModelConfig, demo: DemoConfig, tokenizer, examples):
    config = qwen2_config(demo, len(tokenizer), tokenizer)
    warm = demo.model_copy(update={"warmup_steps": demo.judge_warmup_steps, "warmup_lr": demo.judge_warmup_lr})
    if section.kind == "judge":
        model = Qwen2ForCausalLM(config)
        rows = []
        for request, right in examples:
            prompt = _ids(tokenizer, section, request)
            verdict = [*tokenizer.encode(VERDICTS[right], add_special_tokens=False), tokenizer.eos_token_id]
            rows.append((prompt + verdict, [-100] * len(prompt) + verdict))
        supervised_warmup(model, tokenizer, rows, warm)
        return model
    config.num_labels = 1
    model = Qwen2ForSequenceClassification(config)
    rng = random.Random(demo.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=warm.warmup_lr)
    model.train()
    for _ in range(warm.warmup_steps):
        batch = rng.sample(examples, min(warm.warmup_batch_size, len(examples)))
        ids, mask = _left_padded(tokenizer, [_ids(tokenizer, section, r) for r, _ in batch])
        target = torch.tensor([float(right) for _, right in batch])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(input_ids=ids, attention_mask=mask).logits[:, 0], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _left_padded(tokenizer, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], mask[i, width - len(r):] = torch.tensor(r), 1
    return ids, mask


@torch.no_grad()
def verdict_accuracy(model, tokenizer, section: RewardModelConfig, examples) -> float:
    """The share of examples the model gets right: greedy "y"/"n" (judge) or the logit's sign (scorer)."""
    model.eval()
    ids, mask = _left_padded(tokenizer, [_ids(tokenizer, section, r) for r, _ in examples])
    logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    if section.kind == "judge":
        yes, no = (tokenizer.convert_tokens_to_ids(VERDICTS[v]) for v in (True, False))
        said_yes = logits[:, -1, yes] > logits[:, -1, no]
    else:
        said_yes = logits[:, 0] > 0
    return sum(bool(y) == right for y, (_, right) in zip(said_yes, examples)) / len(examples)

"""The demo policy: a small Qwen2-architecture model built offline from the config, warmed up on the task
(arithmetic or calculator word problems), cached by config hash. Loading any policy is rayrl.models.policy."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

from rayrl.config import DataConfig, DemoConfig, ModelConfig
from rayrl.data.arithmetic import split
from rayrl.data.word_problems import split_word_problems, warmup_conversations
from rayrl.models.tokenizer import CHARS, CHAT_TEMPLATE, build_char_tokenizer, build_chat_tokenizer
from rayrl.models.vision import VIDEO_PAD, VISION_TOKENS
from rayrl.demo.warmup import chat_rows, supervised_warmup
from rayrl.workflows.tools import calculator


def _build_hash(demo: DemoConfig, data: DataConfig) -> str:
    key = {
        "build": demo.model_dump(exclude={"cache_dir", "judge_warmup_steps", "judge_warmup_lr",
                                          *(() if data.task == "visual_arithmetic" else ("vision_depth", "vision_dim"))}),
        "data": data.model_dump(),
        "chars": "".join(CHARS),
        **({"chat_template": CHAT_TEMPLATE} if data.task != "arithmetic" else {}),
        **({"vision_tokens": [*VISION_TOKENS, VIDEO_PAD], "video_pad_row": "added after the draws"}
           if data.task == "visual_arithmetic" else {}),
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def demo_tokenizer(data: DataConfig):
    """The tokenizer the demo policy of data.task is built with."""
    if data.task == "visual_arithmetic":
        from rayrl.demo.vision_policy import build_vision_tokenizer

        return build_vision_tokenizer()
    return build_char_tokenizer() if data.task == "arithmetic" else build_chat_tokenizer()


def qwen2_config(b: DemoConfig, vocab_size: int, tokenizer) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=b.hidden_size, intermediate_size=b.intermediate_size,
        num_hidden_layers=b.num_layers, num_attention_heads=b.num_heads, num_key_value_heads=b.num_kv_heads,
        head_dim=b.head_dim, max_position_embeddings=b.max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )


def build_model(model: ModelConfig, demo: DemoConfig, data: DataConfig) -> Path:
    """Return a local HF directory for the policy: model.path if given, else the demo model built for the task
    (cached by a hash of demo.* and data.*)."""
    if model.path is not None:
        path = Path(model.path).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model.path '{model.path}' has no config.json; "
                                    "give a local Hugging Face model directory or leave model.path unset")
        return path
    if data.task not in ("arithmetic", "word_problems", "visual_arithmetic"):
        raise ValueError(f"data.task={data.task} needs model.path (a local Hugging Face model directory); "
                         "only the arithmetic, word_problems and visual_arithmetic tasks build their own model")
    name = {"arithmetic": "arith", "visual_arithmetic": "vl-arith"}.get(data.task, data.task)
    out = Path(demo.cache_dir).expanduser() / f"qwen2-{name}-{_build_hash(demo, data)}"
    if (out / "config.json").is_file():
        return out
    if data.task == "visual_arithmetic":
        from rayrl.demo.vision_policy import build_vision_policy

        with one_thread():
            model, tokenizer, processor = build_vision_policy(demo, data)
        return save_built(model, tokenizer, out, processor)
    tokenizer = demo_tokenizer(data)
    with one_thread():
        torch.manual_seed(demo.seed)
        built = Qwen2ForCausalLM(qwen2_config(demo, len(tokenizer), tokenizer))
        supervised_warmup(built, tokenizer, _warmup_rows(demo, data, tokenizer), demo)
    return save_built(built, tokenizer, out)


@contextlib.contextmanager
def one_thread():
    """One torch thread: the same bits on every machine for the same config."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def save_built(model, tokenizer, out: Path, processor=None) -> Path:
    """Model and tokenizer (and a vision-language model's image processor) into a temporary directory beside
    out, then renamed to out."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".build-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if processor is not None:
        processor.save_pretrained(tmp)
    try:
        os.replace(tmp, out)  # atomic: a concurrent builder of the same hash loses the race harmlessly
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _warmup_rows(demo: DemoConfig, data: DataConfig, tokenizer) -> list:
    """arithmetic: prompt -> answer pairs; word_problems: calculator-agent transcripts through the chat template."""
    if data.task == "arithmetic":
        train, _ = split(data)
        return train
    train, _ = split_word_problems(data)
    return chat_rows(tokenizer, warmup_conversations(train, demo.seed), [calculator.schema()])

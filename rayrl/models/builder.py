"""Build a small Qwen2-architecture policy from the config, warm it up, cache it by config hash."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rayrl.config import Config
from rayrl.data.arithmetic import split
from rayrl.models.logprob_head import use_logprob_head
from rayrl.data.word_problems import split_word_problems, warmup_conversations
from rayrl.models.tokenizer import CHARS, CHAT_TEMPLATE, build_char_tokenizer, build_chat_tokenizer, load_tokenizer
from rayrl.models.warmup import chat_rows, supervised_warmup
from rayrl.workflows.tools import calculator


def _build_hash(cfg: Config) -> str:
    key = {
        "build": cfg.model.build.model_dump(),
        "data": cfg.data.model_dump(),
        "chars": "".join(CHARS),
        **({"chat_template": CHAT_TEMPLATE} if cfg.data.task != "arithmetic" else {}),
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def qwen2_config(cfg: Config, vocab_size: int, tokenizer) -> Qwen2Config:
    b = cfg.model.build
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=b.hidden_size, intermediate_size=b.intermediate_size,
        num_hidden_layers=b.num_layers, num_attention_heads=b.num_heads, num_key_value_heads=b.num_kv_heads,
        head_dim=b.head_dim, max_position_embeddings=b.max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )


def build_model(cfg: Config) -> Path:
    """Return a local HF directory for the policy: model.path if given, else a cached built one."""
    if cfg.model.path is not None:
        path = Path(cfg.model.path).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model.path '{cfg.model.path}' has no config.json; "
                                    "give a local Hugging Face model directory or leave model.path unset")
        return path
    if cfg.data.task not in ("arithmetic", "word_problems"):
        raise ValueError(f"data.task={cfg.data.task} needs model.path (a local Hugging Face model directory); "
                         "only the arithmetic and word_problems tasks build their own model")
    name = "arith" if cfg.data.task == "arithmetic" else cfg.data.task
    out = Path(cfg.model.cache_dir).expanduser() / f"qwen2-{name}-{_build_hash(cfg)}"
    if (out / "config.json").is_file():
        return out
    tokenizer = build_char_tokenizer() if cfg.data.task == "arithmetic" else build_chat_tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same bits on every machine for the same config
    try:
        torch.manual_seed(cfg.model.build.seed)
        model = Qwen2ForCausalLM(qwen2_config(cfg, len(tokenizer), tokenizer))
        supervised_warmup(model, tokenizer, _warmup_rows(cfg, tokenizer), cfg.model.build)
    finally:
        torch.set_num_threads(threads)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".build-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, out)  # atomic: a concurrent builder of the same hash loses the race harmlessly
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _warmup_rows(cfg: Config, tokenizer) -> list:
    """arithmetic: prompt -> answer pairs; word_problems: calculator-agent transcripts through the chat template."""
    if cfg.data.task == "arithmetic":
        train, _ = split(cfg.data)
        return train
    train, _ = split_word_problems(cfg.data)
    return chat_rows(tokenizer, warmup_conversations(train, cfg.model.build.seed), [calculator.schema()])


def load_policy(path: str | os.PathLike, attn_implementation: str = "eager", logprob_chunk_tokens: int | None = None,
                compile_layers: bool = False):
    """(model in fp32, tokenizer) from a local directory, offline. Eager attention on CPU keeps
    rollout and learner log-probs equal to 1e-5; GPU learners pass the varlen kernel. Learners pass
    logprob_chunk_tokens (learner.logprob_chunk_tokens) to score through a TokenLogprobHead, and
    compile_layers (learner.compile) to torch.compile each decoder layer and that head."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn_implementation)
    if logprob_chunk_tokens is not None:
        use_logprob_head(model, logprob_chunk_tokens, compiled=compile_layers)
    if compile_layers:
        for layer in model.model.layers:
            layer.compile()  # before sharding: FSDP2 / ZeRO hooks stay outside the compiled graph
    tokenizer = load_tokenizer(path)
    return model, tokenizer


QWEN2_0_5B_SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                        num_key_value_heads=2, head_dim=64, vocab_size=151936)
QWEN2_1_5B_SHAPE = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                        num_key_value_heads=2, head_dim=128, vocab_size=151936)


def save_random_qwen2(out: str | os.PathLike, initializer_range: float = 0.02, dtype=torch.bfloat16,
                      chars: list[str] = CHARS, weights: bool = True, **shape) -> Path:
    """A randomly initialised Qwen2 of the given shape plus a char tokenizer over chars, saved offline.

    A large initializer_range makes next-token distributions peaked rather than near-uniform.
    weights=False writes config and tokenizer only, for vLLM's load_format="dummy"."""
    out = Path(out)
    tokenizer = build_char_tokenizer(chars)
    shape = {"vocab_size": len(tokenizer), **shape}
    config = Qwen2Config(**shape, max_position_embeddings=4096, tie_word_embeddings=shape["hidden_size"] < 2048,
                         initializer_range=initializer_range, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         torch_dtype=str(dtype).removeprefix("torch."))
    if weights:
        torch.manual_seed(0)
        Qwen2ForCausalLM(config).to(dtype).save_pretrained(out)
    else:
        config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out

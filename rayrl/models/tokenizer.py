"""A character-level tokenizer built offline with `tokenizers`, saved in Hugging Face format."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = list("0123456789+-*=/() ?:.,abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n")
TEXT_CHARS = CHARS + [c for c in "!\"#$%&'<>[]_;@" if c not in CHARS]  # enough for GSM8K-style text


CHAT_CHARS = TEXT_CHARS + ["{", "}"]  # tool calls are JSON
CHAT_MARKUP = ["<|im_start|>", "<|im_end|>"]  # special: dropped from decoded text
TOOL_TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # kept in decoded text

# Qwen-style markup, kept compact for a character-level model: the system line lists tool names only
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools: {{ tools | map(attribute='function.name') | join(', ') }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson if c.function.arguments is mapping else c.function.arguments }}}</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_char_tokenizer(chars: list[str] = CHARS) -> PreTrainedTokenizerFast:
    """One token per character; specials first so pad=0, bos=1, eos=2, unk=3."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + [c for c in chars if c not in SPECIALS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        padding_side="left",
    )


def build_chat_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer plus chat markup and tool tags as single tokens, EOS = <|im_end|>, and a
    chat template with tool calls (for agent episodes)."""
    tok = build_char_tokenizer(CHAT_CHARS)
    tok.add_special_tokens({"additional_special_tokens": CHAT_MARKUP})
    tok.add_tokens(TOOL_TAGS)
    tok.eos_token = "<|im_end|>"
    tok.chat_template = CHAT_TEMPLATE
    return tok


def load_tokenizer(path):
    """The tokenizer of a local model directory. Tokenizers saved from a tokenizers object (the ones
    built here: tokenizer_class TokenizersBackend) load as exactly that; AutoTokenizer would swap in the
    model type's own class (Qwen2Tokenizer), whose byte-level pre-tokenizer drops spaces and newlines."""
    import json
    from pathlib import Path

    from transformers import AutoTokenizer

    config = Path(path) / "tokenizer_config.json"
    saved = json.loads(config.read_text()).get("tokenizer_class") if config.is_file() else None
    if saved in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)

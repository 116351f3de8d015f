"""A character-level tokenizer built offline with `tokenizers`, saved in Hugging Face format."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = list("0123456789+-*=/() ?:.,abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n")
TEXT_CHARS = CHARS + [c for c in "!\"#$%&'<>[]_;@" if c not in CHARS]  # enough for GSM8K-style text


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

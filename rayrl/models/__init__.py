"""Small local models and tokenizers, built from a config (no hub)."""

from rayrl.models.builder import build_model, load_policy
from rayrl.models.tokenizer import build_char_tokenizer

__all__ = ["build_model", "build_char_tokenizer", "load_policy"]

"""The prompt template and tokenizer, bundled so they travel through the object store once."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from rayrl.types import Task


@dataclass
class PromptTemplate:
    """Turns a task into prompt token ids: BOS + the formatted text."""

    tokenizer: PreTrainedTokenizerBase
    text: str = "{prompt}"

    def encode(self, task: Task) -> list[int]:
        ids = self.tokenizer.encode(self.text.format(prompt=task.prompt), add_special_tokens=False)
        return [self.tokenizer.bos_token_id, *ids]

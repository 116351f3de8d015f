"""The prompt template and tokenizer, bundled so they travel through the object store once."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from rayrl.types import Task


@dataclass
class PromptTemplate:
    """Turns a task into prompt token ids (BOS + formatted text) and completion ids back into text."""

    tokenizer: PreTrainedTokenizerBase
    text: str = "{prompt}"

    def encode(self, task: Task) -> list[int]:
        ids = self.tokenizer.encode(self.text.format(prompt=task.prompt), add_special_tokens=False)
        return [self.tokenizer.bos_token_id, *ids]

    def decode(self, completion_ids: list[int]) -> str:
        return self.tokenizer.decode(completion_ids, skip_special_tokens=True)

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

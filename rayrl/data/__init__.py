"""Datasets, synthetic tasks and prompt templates."""

from rayrl.data.arithmetic import endless, split
from rayrl.data.template import PromptTemplate

__all__ = ["PromptTemplate", "endless", "split"]

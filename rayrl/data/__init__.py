"""Datasets, synthetic tasks and prompt templates."""

from rayrl.data.arithmetic import endless, split
from rayrl.data.stream import PromptStream, stream_position
from rayrl.data.tasks import load_tasks
from rayrl.data.template import PromptTemplate

__all__ = ["PromptStream", "PromptTemplate", "endless", "load_tasks", "split", "stream_position"]

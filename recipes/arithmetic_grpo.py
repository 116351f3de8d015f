"""Tiny arithmetic GRPO on CPU: a locally built Qwen2-shaped model learns to add.

    python recipes/arithmetic_grpo.py --config recipes/arithmetic_grpo.yaml rollout.max_staleness=0
"""

import json

from rayrl.cli import parse_args
from rayrl.trainer import train

if __name__ == "__main__":
    summary = train(parse_args(prog="arithmetic_grpo"))
    print(json.dumps(summary, indent=2))

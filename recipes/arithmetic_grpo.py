"""Tiny arithmetic GRPO on CPU: a locally built Qwen2-shaped model learns to add.

    python recipes/arithmetic_grpo.py --config recipes/arithmetic_grpo.yaml rollout.max_staleness=0
"""

from rayrl.cli import parse_args, run

if __name__ == "__main__":
    run(parse_args(prog="arithmetic_grpo"))

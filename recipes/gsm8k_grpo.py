"""GRPO on GSM8K with vLLM rollout workers and an FSDP2 learner on GPUs.

    python recipes/gsm8k_grpo.py --config recipes/gsm8k_grpo.yaml model.path=/models/qwen2-1.5b
    ray job submit --working-dir . -- python recipes/gsm8k_grpo.py --config recipes/gsm8k_grpo.yaml
"""

from rayrl.cli import parse_args, run

if __name__ == "__main__":
    run(parse_args(prog="gsm8k_grpo"))

"""Policies: loading one (policy), tokenizers, the learner's scoring head and kernels (logprob_head, bitwise_ops,
bitwise_qwen2, varlen_attention), LoRA adapters. Building the demo models is rayrl.demo's. Import the module you
need: each pulls in only its own."""

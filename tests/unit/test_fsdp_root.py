"""FSDP2's root unit keeps its gathered (bf16) parameters registered after a forward. The weights a sync
sends and the weights the next forward reads must still be the fp32 masters after an optimizer step."""

from __future__ import annotations

import torch
import torch.distributed as dist
from transformers import Qwen2Config, Qwen2ForCausalLM

from rayrl.config import load_config
from rayrl.engines.learner.fsdp_backend import FSDPBackend


def test_weights_after_a_scoring_forward_are_the_masters(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True)
        cfg = load_config(None, ["learner.backend=fsdp", "learner.dtype=bfloat16", "learner.lr=1e-2",
                                 "learner.lr_warmup_steps=0"])
        backend = FSDPBackend(cfg.learner, Qwen2ForCausalLM(config), None, torch.device("cpu"))
        ids = torch.randint(0, 50, (2, 8))
        with torch.no_grad():
            backend.model(ids)  # a scoring pass: the root stays gathered
        sent = dict(backend.named_full_weights())
        assert {t.dtype for t in sent.values()} == {torch.float32}, "a sync would send the bf16 copies"
        backend.backward(backend.model(ids).logits.float().logsumexp(-1).sum(), last=True)
        backend.step()
        with torch.no_grad():
            seen = backend.model(ids).logits
            backend.model.reshard()  # gather again from the masters
            assert torch.equal(seen, backend.model(ids).logits), "the forward after a step read stale weights"
    finally:
        dist.destroy_process_group()

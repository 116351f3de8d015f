"""Packed (padding-free), padded and shared-prompt micro-batching give the same loss and gradients."""

import pytest
import torch

from rayrl.batching import collate
from rayrl.engines.learner.device import packs_sequences, shares_prompts
from rayrl.engines.learner.microbatch import (PADDING_SHARE, empty_like, microbatches, minibatch_rows,
                                             plan_microbatches, plan_padded, segment_mask, view)
from rayrl import components
from rayrl.demo import prepare_models


def test_collate_lays_each_sample_out_in_its_row(random_groups):
    groups = random_groups(3, 4, seed=11)
    masked = groups[1].samples[2]  # an agent's sample: tool-output tokens are not trained on
    masked.loss_mask = [i % 2 for i in range(len(masked.completion_ids))]
    groups[2].samples[0].versions = list(range(len(groups[2].samples[0].completion_ids)))
    groups[0].samples[1].finish_reason = "length"
    batch = collate(groups, pad_id=99)
    rows = [(gi, s) for gi, g in enumerate(groups) for s in g.samples]
    assert batch.input_ids.shape == (12, max(len(s.prompt_ids) + len(s.completion_ids) for _, s in rows))
    for b, (gi, s) in enumerate(rows):
        p, n = len(s.prompt_ids), len(s.prompt_ids) + len(s.completion_ids)
        assert batch.input_ids[b, :n].tolist() == s.prompt_ids + s.completion_ids
        assert (batch.input_ids[b, n:] == 99).all() and batch.attention_mask[b].tolist() == [1] * n + [0] * (
            batch.input_ids.shape[1] - n)
        want_mask = s.loss_mask if s.loss_mask is not None else [1] * (n - p)
        assert batch.loss_mask[b, p:n].tolist() == want_mask and batch.loss_mask[b, :p].sum() == 0
        assert batch.loss_mask[b, n:].sum() == 0 and batch.behav_logprobs[b, n:].abs().sum() == 0
        assert batch.behav_logprobs[b, p:n].tolist() == torch.tensor(s.logprobs, dtype=torch.float32).tolist()
        assert batch.versions[b, p:n].tolist() == s.versions and batch.versions[b, :p].sum() == 0
        assert batch.group_index[b] == gi and batch.rewards[b] == s.reward
        assert bool(batch.truncated[b]) == (s.finish_reason == "length")
    assert batch.input_ids.dtype == batch.versions.dtype == batch.attention_mask.dtype == torch.long
    assert batch.loss_mask.dtype == batch.behav_logprobs.dtype == torch.float32


def test_first_fit_plan_respects_budget_and_keeps_every_sequence():
    lengths = [7, 3, 9, 2, 5, 5, 1]
    plan = plan_microbatches(lengths, max_tokens=10)
    assert sorted(i for mb in plan for i in mb) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in mb) <= 10 for mb in plan)
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch"):
        plan_microbatches([11], max_tokens=10)


def test_a_plan_with_groups_keeps_each_group_together_where_the_budget_allows():
    """Images: a group's rows share a micro-batch, so its picture goes through the tower once; by length alone
    the same rows spread over every micro-batch."""
    lengths = [10, 7, 9, 6, 8, 10, 7, 9, 9, 6, 8, 10]
    groups = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    pictures = lambda plan: sum(len({groups[i] for i in mb}) for mb in plan)  # noqa: E731
    by_group = plan_microbatches(lengths, max_tokens=34, groups=groups)
    assert sorted(i for mb in by_group for i in mb) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in mb) <= 34 for mb in by_group)
    assert sorted(sorted({groups[i] for i in mb}) for mb in by_group) == [[0], [1], [2]]
    assert pictures(by_group) == 3 < pictures(plan_microbatches(lengths, max_tokens=34)) == 10


def test_padded_plan_groups_similar_lengths_under_the_padded_budget():
    lengths = [12, 5, 11, 6, 12, 5, 7, 11, 6, 13]
    plan = plan_padded(lengths, max_tokens=40)
    assert sorted(i for mb in plan for i in mb) == list(range(len(lengths)))
    for mb in plan:
        rows, width = len(mb), max(lengths[i] for i in mb)
        assert rows * width <= 40 and sum(lengths[i] for i in mb) >= (1 - PADDING_SHARE) * rows * width, mb
    assert [sorted(lengths[i] for i in mb) for mb in plan] == [[12, 12, 13], [7, 11, 11], [5, 5, 6, 6]]
    assert plan_padded([4] * 10, max_tokens=1000) == [list(range(10))]  # equal lengths: one micro-batch
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch"):
        plan_padded([11], max_tokens=10)


@pytest.fixture(scope="module")
def model_path(make_cfg):
    return prepare_models(make_cfg("demo.warmup_steps=20")).policy


def loss_and_grads(make_cfg, model_path, random_groups, *overrides, same_prompt=False):
    cfg = make_cfg(*overrides, "learner.lr=1e-3")
    learner = components.learner(cfg, model_path)
    learner.backend.step = lambda: 0.0  # keep the gradients: no optimizer step, no zeroing
    batch = collate(random_groups(4, 4, same_prompt=same_prompt), learner.tokenizer.pad_token_id)
    stats = learner.train_step(batch)
    return stats, {n: p.grad.clone() for n, p in learner.backend.model.named_parameters()}


def test_packed_equals_padded(make_cfg, model_path, random_groups):
    batch = collate(random_groups(4, 4), 0)
    batch.advantages = torch.zeros_like(batch.loss_mask)
    packed = microbatches(batch, max_tokens=40, pack=True)
    assert len(packed) > 1 and all(mb.attention_mask is None and mb.n_tokens <= 40 for mb in packed)
    ref_stats, ref_grads = loss_and_grads(make_cfg, model_path, random_groups, "learner.pack_sequences=false",
                                          "learner.max_tokens_per_micro_batch=10000")
    for overrides in (("learner.pack_sequences=true", "learner.max_tokens_per_micro_batch=40"),
                      ("learner.pack_sequences=false", "learner.max_tokens_per_micro_batch=40"),
                      ("learner.pack_sequences=true", "learner.max_tokens_per_micro_batch=10000")):
        stats, grads = loss_and_grads(make_cfg, model_path, random_groups, *overrides)
        assert stats["loss"] == pytest.approx(ref_stats["loss"], abs=1e-6), overrides
        worst = max((grads[n] - ref_grads[n]).abs().max().item() for n in grads)
        assert worst <= 1e-5, (overrides, worst)
    assert any(g.abs().max() > 0 for g in ref_grads.values())


def test_shared_prompts_equal_one_row_per_sample(make_cfg, model_path, random_groups):
    """learner.share_prompts: a group's prompt once per row, each sample a branch that sees it and itself, gives
    the loss and gradients of one padded row per sample, through fewer tokens; a tight budget cuts a group."""
    batch = collate(random_groups(4, 4, same_prompt=True), 0)
    rows = microbatches(batch, max_tokens=10_000, pack=False)
    (mb,) = microbatches(batch, max_tokens=10_000, pack=False, share_prompts=True)
    assert mb.input_ids.shape[0] == 4 and mb.n_sequences == 16 == sum(r.n_sequences for r in rows)
    assert mb.attention_mask.sum() < sum(r.attention_mask.sum() for r in rows)
    assert torch.equal(view(batch.input_ids, mb), mb.input_ids * mb.attention_mask)  # each token maps back
    assert float(mb.loss_mask.sum()) == float(batch.loss_mask.sum())  # every scored token, once
    mask = segment_mask(mb.segments, torch.float32)[0, 0]
    first, second = (mb.segments[0] == 1).nonzero()[-1], (mb.segments[0] == 2).nonzero()[-1]
    assert mask[second, 0] == 0 and mask[second, first] < 0  # the prefix is seen, another branch is not
    cut = microbatches(batch, max_tokens=16, pack=False, share_prompts=True)
    assert sum(m.n_sequences for m in cut) == 16 and all(m.n_tokens <= 16 for m in cut)
    ref_stats, ref_grads = loss_and_grads(make_cfg, model_path, random_groups, "learner.share_prompts=false",
                                          "algorithm.loss_agg=seq_mean_token_mean", same_prompt=True)
    for budget in (10_000, 16):
        stats, grads = loss_and_grads(make_cfg, model_path, random_groups, "learner.share_prompts=true",
                                      f"learner.max_tokens_per_micro_batch={budget}",
                                      "algorithm.loss_agg=seq_mean_token_mean", same_prompt=True)
        assert stats["loss"] == pytest.approx(ref_stats["loss"], abs=1e-6), budget
        assert max((grads[n] - ref_grads[n]).abs().max().item() for n in grads) <= 1e-5, budget
    cpu = torch.device("cpu")
    assert shares_prompts(make_cfg().learner, cpu, bitwise=False)  # the CPU default
    assert not shares_prompts(make_cfg().learner, cpu, bitwise=True)
    with pytest.raises(ValueError, match="learner.share_prompts=true needs a CPU learner with padded rows"):
        shares_prompts(make_cfg("learner.share_prompts=true", "learner.pack_sequences=true").learner, cpu, False)


def test_minibatches_are_whole_groups_each_its_own_optimizer_step(make_cfg, model_path, random_groups):
    """learner.minibatches=2 on a batch that fits one micro-batch: two optimizer steps, each on half of the
    groups: the weights of two steps on those halves in turn (no off-policy correction: no scoring between)."""
    index = torch.tensor([0] * 3 + [1] * 5 + [2] * 4 + [3] * 4)
    assert minibatch_rows(index, 2) == [list(range(8)), list(range(8, 16))]
    assert minibatch_rows(index, 5) == [[0, 1, 2], list(range(3, 8)), [], list(range(8, 12)), list(range(12, 16))]
    groups = random_groups(4, 4, seed=5, same_prompt=True)
    batch = collate(groups, 0)
    for layout in ({"pack": True}, {"pack": False}, {"pack": False, "share_prompts": True}):
        mbs = microbatches(batch, max_tokens=10_000, rows=list(range(4, 12)), **layout)
        assert sum(mb.n_sequences for mb in mbs) == 8, layout
        assert {int(i) for mb in mbs for i in mb.seq_ids.unique() if i >= 0} == set(range(4, 12)), layout
    overrides = ("learner.lr=1e-3", "algorithm.off_policy_correction=false", "learner.max_tokens_per_micro_batch=10000")
    split = components.learner(make_cfg(*overrides, "learner.minibatches=2"), model_path)
    halves = components.learner(make_cfg(*overrides), model_path)
    stats = split.train_step(collate(groups, split.tokenizer.pad_token_id))
    for half in (groups[:2], groups[2:]):
        halves.train_step(collate(half, halves.tokenizer.pad_token_id))
    assert stats["micro_batches"] == 2 and split.version == 1
    assert {int(s["step"]) for s in split.backend.optimizer.state.values()} == {2}
    moved = 0.0
    for (name, p), q, r in zip(split.backend.model.named_parameters(), halves.backend.model.parameters(),
                               components.learner(make_cfg(*overrides), model_path).backend.model.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-6), name
        moved = max(moved, float((p - r).detach().abs().max()))
    assert moved > 1e-4


def test_the_critic_takes_the_policys_minibatches(make_cfg, model_path, random_groups):
    """PPO's critic under learner.minibatches=2: two optimizer steps, the weights of two steps on the halves."""
    groups = random_groups(4, 4, seed=5)
    overrides = ("algorithm.critic_lr=1e-3", "algorithm.value_clip=100.0", "learner.max_tokens_per_micro_batch=10000")

    def step(critic, part):
        batch = collate(part, 0)
        returns = batch.loss_mask * torch.as_tensor(batch.rewards, dtype=torch.float32)[:, None]
        return critic.train_step(batch, returns, torch.zeros_like(returns))

    split, halves = (components.critic(make_cfg(*overrides, *extra), model_path) for extra in
                     (("learner.minibatches=2",), ()))
    assert step(split, groups)["critic_loss"] > 0
    for half in (groups[:2], groups[2:]):
        step(halves, half)
    assert {int(s["step"]) for s in split.backend.optimizer.state.values()} == {2}
    start = components.critic(make_cfg(*overrides), model_path).backend.model.parameters()
    moved = 0.0
    for (name, p), q, r in zip(split.backend.model.named_parameters(), halves.backend.model.parameters(), start):
        assert torch.allclose(p, q, rtol=0, atol=1e-6), name
        moved = max(moved, float((p - r).detach().abs().max()))
    assert moved > 1e-4


def test_packed_rows_carry_the_offsets_the_varlen_kernel_reads(make_cfg, random_groups):
    batch = collate(random_groups(2, 3), 0)
    batch.advantages = torch.zeros_like(batch.loss_mask)
    (mb,) = microbatches(batch, max_tokens=10_000, pack=True)
    lengths = batch.attention_mask.sum(-1)
    assert mb.cu_seqlens.dtype == torch.int32
    assert mb.cu_seqlens.tolist() == [0, *lengths.cumsum(0).tolist()] and mb.max_seqlen == lengths.max()
    kwargs = mb.attention_kwargs("cpu")
    assert kwargs["cu_seq_lens_q"] is kwargs["cu_seq_lens_k"] and kwargs["max_length_q"] == mb.max_seqlen
    rows = microbatches(batch, max_tokens=10_000, pack=False)[0]
    assert rows.cu_seqlens is None and rows.attention_kwargs("cpu") == {}
    assert empty_like(mb).cu_seqlens.tolist() == [0, 1] and empty_like(rows).cu_seqlens is None
    # by default packed only where the varlen kernel runs: on this CPU machine, padded
    cpu = torch.device("cpu")
    assert not packs_sequences(make_cfg().learner, cpu) and packs_sequences(make_cfg("learner.pack_sequences=true").learner, cpu)


def test_compiled_learner_equals_eager(make_cfg, model_path, random_groups):
    """learner.compile=true (torch.compile of each decoder layer and of the log-prob head's arithmetic)
    gives eager's loss and gradients; inductor compiles for the CPU here as it does for GPUs there."""
    eager_stats, eager_grads = loss_and_grads(make_cfg, model_path, random_groups, "learner.pack_sequences=true")
    stats, grads = loss_and_grads(make_cfg, model_path, random_groups, "learner.pack_sequences=true",
                                  "learner.compile=true")
    assert stats["loss"] == pytest.approx(eager_stats["loss"], abs=1e-6)
    assert max((grads[n] - eager_grads[n]).abs().max().item() for n in grads) <= 1e-5


def test_varlen_kernel_finds_sequences_where_positions_restart():
    """Without cu_seq_lens the varlen attention derives them: each row, and each restart within a row."""
    from rayrl.models.varlen_attention import _starts

    cu, longest = _starts(torch.tensor([[0, 1, 2, 0, 1, 0]]), 1, 6, "cpu")
    assert cu.tolist() == [0, 3, 5, 6] and longest == 3 and cu.dtype == torch.int32
    cu, longest = _starts(None, 2, 4, "cpu")
    assert cu.tolist() == [0, 4, 8] and longest == 4
    cu, _ = _starts(torch.arange(4).unsqueeze(0), 2, 4, "cpu")  # one position row shared by two rows
    assert cu.tolist() == [0, 4, 8]

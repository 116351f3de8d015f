"""Rules across config sections, one named function each: (config) -> None when it holds, or the message that
says what is wrong and what to set. Config's validator runs them all (check_rules); tests call them by name.
Rules that need a component's code (a transport's requirements) run in rayrl.preflight, before Ray starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rayrl.config.sections import GROUP_RELATIVE

if TYPE_CHECKING:  # the root is built on these rules: a type-only import, no cycle at run time
    from rayrl.config.run import Config


def group_relative_needs_groups(c: Config) -> str | None:

    if c.rollout.group_size < 2 and c.algorithm.type in GROUP_RELATIVE:
        return (f"algorithm.type={c.algorithm.type} compares the samples of a group: rollout.group_size must be >= 2 "
                f"(got {c.rollout.group_size}); for one sample per prompt use algorithm.type=reinforce_pp or ppo")
    return None


def dynamic_sampling_needs_groups(c: Config) -> str | None:
    if c.rollout.group_size < 2 and c.algorithm.dynamic_sampling:
        return ("algorithm.dynamic_sampling drops groups whose rewards are all equal, which with rollout.group_size=1 "
                "is every group; set algorithm.dynamic_sampling=false")
    return None


def overlong_buffer_fits(c: Config) -> str | None:
    if c.algorithm.overlong_buffer >= c.rollout.max_new_tokens:
        return (f"algorithm.overlong_buffer ({c.algorithm.overlong_buffer}) must be below rollout.max_new_tokens "
                f"({c.rollout.max_new_tokens})")
    return None


def openai_agent_needs_fn(c: Config) -> str | None:
    if c.rollout.workflow.endswith(":OpenAIAgent") and not c.agent.fn:
        return ("rollout.workflow=...:OpenAIAgent runs agent.fn; set agent.fn='package.module:agent' (an async "
                "function (client, task) -> reward or None)")
    return None


def colocate_is_synchronous(c: Config) -> str | None:
    if c.placement.mode == "colocate" and c.rollout.max_staleness != 0:
        return (f"placement.mode=colocate takes turns on each device (the rollout engine sleeps while the learner "
                f"trains), so generation never overlaps training: set rollout.max_staleness=0 (got "
                f"{c.rollout.max_staleness}), or placement.mode=share or split for asynchronous RL")
    return None


def share_memory_fits(c: Config) -> str | None:
    k = c.placement.rollouts_per_gpu
    both = k * c.vllm.gpu_memory_utilization + (c.learner.gpu_memory_fraction or 1.0)
    if c.placement.mode == "share" and c.on_gpu and both > 1.0:
        return (f"placement.mode=share splits each GPU's memory: placement.rollouts_per_gpu ({k}) * "
                f"vllm.gpu_memory_utilization ({c.vllm.gpu_memory_utilization}) + learner.gpu_memory_fraction "
                f"({c.learner.gpu_memory_fraction}; unset counts as 1) must be at most 1 (got {both:.2f})")
    return None


def rollouts_per_gpu_is_share(c: Config) -> str | None:
    k, p = c.placement.rollouts_per_gpu, c.placement
    if k > 1 and p.mode != "share":
        return (f"placement.rollouts_per_gpu={k} puts several rollout workers beside each learner rank: it needs "
                f"placement.mode=share (got {p.mode}); in split mode, raise rollout.num_workers instead")
    if k > 1 and c.rollout.num_workers != k * c.learner.num_workers:
        return (f"placement.rollouts_per_gpu={k} with learner.num_workers={c.learner.num_workers} needs "
                f"rollout.num_workers={k * c.learner.num_workers} (got {c.rollout.num_workers})")
    if k > 1 and c.reward.model.kind != "none" and c.reward.model.placement == "rollout":
        return (f"placement.rollouts_per_gpu={k} leaves no room for a reward model inside a rollout worker's share: "
                "set reward.model.placement=own")
    return None


def colocated_workers_pair_up(c: Config) -> str | None:
    """colocate and share: rollout worker i lives in learner rank i's bundle (k of them with rollouts_per_gpu)."""
    p, k = c.placement, c.placement.rollouts_per_gpu
    if p.mode == "split" or k > 1:  # k > 1: rollouts_per_gpu_is_share says it with its own key
        return None
    if c.rollout.num_workers != c.learner.num_workers:
        return (f"placement.mode={p.mode} puts each rollout worker in a learner rank's bundle: it needs "
                f"rollout.num_workers == learner.num_workers (got {c.rollout.num_workers} and "
                f"{c.learner.num_workers}); or use placement.mode=split")
    return None


def colocated_vllm_is_one_device(c: Config) -> str | None:
    if c.placement.mode != "split" and c.rollout.engine == "vllm" and c.vllm.tensor_parallel_size > 1:
        return (f"placement.mode={c.placement.mode} gives a vLLM worker one device beside a learner rank: set "
                f"vllm.tensor_parallel_size=1 (got {c.vllm.tensor_parallel_size}) or placement.mode=split")
    return None


def offload_optimizer_needs_colocate(c: Config) -> str | None:
    """Only a colocated learner releases its GPU between steps; elsewhere the setting would do nothing."""
    if c.learner.offload_optimizer and c.placement.mode != "colocate":
        return ("learner.offload_optimizer moves the optimizer state to host memory while colocated engines generate; "
                f"with placement.mode={c.placement.mode} the learner never releases its GPU: set placement.mode="
                "colocate, or learner.cpu_offload=true to keep it in host memory throughout")
    return None


def offload_optimizer_is_not_deepspeed(c: Config) -> str | None:
    if c.learner.offload_optimizer and c.learner.backend == "deepspeed":
        return ("learner.offload_optimizer moves torch/fsdp optimizer state; with learner.backend=deepspeed use "
                "learner.cpu_offload (ZeRO offload)")
    return None


def tensor_parallel_needs_vllm_gpus(c: Config) -> str | None:
    if c.vllm.tensor_parallel_size > 1 and not (c.on_gpu and c.rollout.engine == "vllm"):
        return "vllm.tensor_parallel_size > 1 needs rollout.engine=vllm and GPUs (cluster.n_gpus_per_node > 0)"
    return None


def bitwise_is_verified_setup(c: Config) -> str | None:
    if not c.rollout.bitwise_on_policy:
        return None
    v, lc = c.vllm, c.learner
    needs = {"rollout.engine=vllm": c.rollout.engine == "vllm", "cluster.n_gpus_per_node > 0": c.on_gpu,
             "vllm.dtype=bfloat16": v.dtype == "bfloat16",
             "vllm.tensor_parallel_size=1": v.tensor_parallel_size == 1, "learner.dtype=bfloat16": lc.dtype == "bfloat16",
             "learner.compile=false": not lc.compile, "learner.backend=fsdp or torch": lc.backend in ("fsdp", "torch"),
             "learner.num_workers=1": lc.num_workers == 1, "vllm.lm_head_fp32=false": not v.lm_head_fp32}
    missing = [k for k, ok in needs.items() if not ok]
    if missing:
        return ("rollout.bitwise_on_policy=true is verified for one learner rank on vLLM's bf16 kernels; set "
                + ", ".join(missing))
    return None


def lora_has_a_path(c: Config) -> str | None:
    if not c.lora.enabled:
        return None
    unsupported = {"learner.backend=deepspeed (ZeRO partitions PEFT's frozen base and its adapters alike; "
                   "not verified)": c.learner.backend == "deepspeed",
                   "rollout.bitwise_on_policy=true (its forward has no adapters)": c.rollout.bitwise_on_policy,
                   "algorithm.type=ppo (not verified with a critic beside the adapters)": c.algorithm.type == "ppo"}
    found = [k for k, bad in unsupported.items() if bad]
    if found:
        return "lora.enabled=true does not work with " + "; ".join(found) + "; use learner.backend=torch or fsdp"
    return None


VLLM_MAX_LORA_RANK = 512  # vLLM's largest max_lora_rank


def lora_rank_fits_vllm(c: Config) -> str | None:
    if c.lora.enabled and c.rollout.engine == "vllm" and c.lora.rank > VLLM_MAX_LORA_RANK:
        return f"lora.rank={c.lora.rank} is above vLLM's largest max_lora_rank ({VLLM_MAX_LORA_RANK}); lower it"
    return None


def lora_keeps_the_base_asleep(c: Config) -> str | None:
    p = c.placement
    if c.lora.enabled and c.rollout.engine == "vllm" and p.mode == "colocate" and p.sleep_level == 2:
        return ("lora.enabled=true with placement.mode=colocate needs placement.sleep_level=1: level 2 frees vLLM's "
                "base weights and a LoRA sync carries only the adapters")
    return None


def lora_on_gpu_vllm_is_half(c: Config) -> str | None:
    """Measured on vLLM 0.26 (H200): its LoRA kernels assert float16 or bfloat16 inputs."""
    if c.lora.enabled and c.rollout.engine == "vllm" and c.on_gpu and c.vllm.dtype == "float32":
        return "lora.enabled=true on vLLM with GPUs needs vllm.dtype=bfloat16 or float16: its LoRA kernels take no float32"
    return None


def elastic_fleet_fits(c: Config) -> str | None:
    r = c.rollout
    if r.fleet != "elastic":
        return None
    if c.placement.mode != "split":
        return (f"rollout.fleet=elastic needs placement.mode=split (got {c.placement.mode}: a worker there shares a "
                "learner's device)")
    if c.rollout.engine == "vllm" and c.vllm.tensor_parallel_size > 1:
        return "rollout.fleet=elastic runs workers of one device each: set vllm.tensor_parallel_size=1"
    if r.max_workers <= r.num_workers:
        return (f"rollout.fleet=elastic needs rollout.max_workers above rollout.num_workers ({r.num_workers}, the "
                f"workers that always run); got {r.max_workers}")
    return None


def reward_model_template_shows_the_answer(c: Config) -> str | None:
    m = c.reward.model
    if m.kind != "none" and "{answer}" not in m.template:
        return (f"reward.model.template {m.template!r} has no {{answer}} placeholder: the model would never see the "
                "sample; use {prompt}, {answer} and {reference}")
    return None


def judge_votes_need_sampling(c: Config) -> str | None:
    m = c.reward.model
    if m.kind == "judge" and m.votes > 1 and m.temperature == 0:
        return (f"reward.model.votes={m.votes} at reward.model.temperature=0 are {m.votes} identical greedy verdicts; "
                "set reward.model.temperature above 0 or votes=1")
    return None


def reward_model_fits_beside_rollout(c: Config) -> str | None:
    """placement=rollout: actor i in rollout worker i's bundle, within that worker's GPU and memory share."""
    m = c.reward.model
    if m.kind == "none" or m.placement != "rollout":
        return None
    if m.num_actors > c.rollout.num_workers:
        return (f"reward.model.num_actors={m.num_actors} with reward.model.placement=rollout needs as many rollout "
                f"workers (rollout.num_workers={c.rollout.num_workers}); lower it or use placement=own")
    if not c.on_gpu:
        return None
    share = 1.0 if c.placement.mode == "split" else 0.5
    if m.gpu_fraction >= share:
        return (f"reward.model.gpu_fraction={m.gpu_fraction} leaves the rollout worker no GPU (its share is {share}); "
                "lower it")
    judge = m.gpu_memory_utilization if m.engine == "vllm" and m.kind == "judge" else 0.0
    learner = c.learner.gpu_memory_fraction or 0.0
    policy = {"split": c.vllm.gpu_memory_utilization, "share": c.vllm.gpu_memory_utilization + learner,
              "colocate": max(c.vllm.gpu_memory_utilization, learner)}[c.placement.mode]  # colocate: they take turns
    if c.rollout.engine == "vllm" and policy + judge > 1.0:
        return (f"the judge's reward.model.gpu_memory_utilization={judge} beside the policy's vLLM (and, colocated or "
                f"shared, the learner's learner.gpu_memory_fraction) is {policy + judge:.2f} of the GPU, above 1; "
                "lower them")
    return None


def served_models_gpus_fit(c: Config) -> str | None:
    """placement=own on GPUs: the policy's GPUs, the reward models' and the teacher's fit the cluster's."""
    served = {key: s for key, s, on in (("reward.model", c.reward.model, c.reward.model.kind != "none"),
                                        ("teacher", c.teacher, c.teacher.enabled)) if on and s.placement == "own"}
    if not served or not c.on_gpu:
        return None
    tp = c.vllm.tensor_parallel_size if c.rollout.engine == "vllm" else 1
    policy = c.rollout.num_workers * tp + (c.learner.num_workers if c.placement.mode == "split" else 0)
    have = c.cluster.n_nodes * c.cluster.n_gpus_per_node
    if policy + sum(s.num_actors * s.gpu_fraction for s in served.values()) > have:
        asked = " and ".join(f"{s.num_actors} × {key}.gpu_fraction={s.gpu_fraction}" for key, s in served.items())
        return (f"placement=own needs {asked} GPUs beside the policy's {policy}, more than the cluster's {have} "
                f"(cluster.n_nodes × n_gpus_per_node); use placement=rollout or lower the gpu_fraction")
    return None


def teacher_has_a_path(c: Config) -> str | None:
    if c.teacher.enabled and not c.teacher.path:
        return ("teacher.enabled needs teacher.path: a local Hugging Face model with the policy's tokenizer "
                "(recipes/arithmetic_distill.py builds one for the arithmetic recipe)")
    return None


def teacher_path_needs_enabled(c: Config) -> str | None:
    if c.teacher.path and not c.teacher.enabled:
        return (f"teacher.path={c.teacher.path} is set but teacher.enabled is false, so no teacher would score: set "
                "teacher.enabled=true, or drop teacher.path for plain RL")
    return None


def reward_model_path_needs_kind(c: Config) -> str | None:
    if c.reward.model.path and c.reward.model.kind == "none":
        return (f"reward.model.path={c.reward.model.path} is set but reward.model.kind=none, so no reward model "
                "would run: set reward.model.kind=judge or scorer, or drop reward.model.path")
    return None


def distillation_keeps_equal_reward_groups(c: Config) -> str | None:
    """Without the task reward in the loss, dynamic sampling would drop groups the teacher still teaches."""
    if c.teacher.enabled and c.algorithm.reward_coef == 0 and c.algorithm.dynamic_sampling:
        return ("algorithm.dynamic_sampling drops groups whose rewards are equal, but with teacher.enabled and "
                "algorithm.reward_coef=0 the reward does not train and every group carries the teacher's signal: "
                "set algorithm.dynamic_sampling=false")
    return None


def teacher_fits_beside_rollout(c: Config) -> str | None:
    t = c.teacher
    if t.enabled and t.placement == "rollout" and t.num_actors > c.rollout.num_workers:
        return (f"teacher.num_actors={t.num_actors} with teacher.placement=rollout needs as many rollout workers "
                f"(rollout.num_workers={c.rollout.num_workers}); lower it or use placement=own")
    return None


def minibatches_fit_the_batch(c: Config) -> str | None:
    need = c.learner.minibatches * c.learner.num_workers
    if c.rollout.batch_size < need:
        return (f"learner.minibatches={c.learner.minibatches} splits each learner rank's groups into that many "
                f"optimizer steps: rollout.batch_size ({c.rollout.batch_size} groups, dealt over "
                f"learner.num_workers={c.learner.num_workers}) must be at least {need}")
    return None


RULES = (group_relative_needs_groups, dynamic_sampling_needs_groups, overlong_buffer_fits,
         openai_agent_needs_fn, colocate_is_synchronous, share_memory_fits,
         rollouts_per_gpu_is_share, colocated_workers_pair_up, colocated_vllm_is_one_device,
         offload_optimizer_needs_colocate, offload_optimizer_is_not_deepspeed,
         tensor_parallel_needs_vllm_gpus, bitwise_is_verified_setup, lora_has_a_path, lora_rank_fits_vllm,
         lora_keeps_the_base_asleep, lora_on_gpu_vllm_is_half, elastic_fleet_fits, reward_model_template_shows_the_answer,
         judge_votes_need_sampling, reward_model_fits_beside_rollout, served_models_gpus_fit, teacher_has_a_path,
         teacher_path_needs_enabled, reward_model_path_needs_kind, distillation_keeps_equal_reward_groups,
         teacher_fits_beside_rollout, minibatches_fit_the_batch)


def check_rules(c: Config) -> None:
    """Raise ValueError with the message of every rule that does not hold, a line each (pydantic reports it)."""
    broken = [why for rule in RULES if (why := rule(c)) is not None]
    if broken:
        raise ValueError("\n  ".join(broken))

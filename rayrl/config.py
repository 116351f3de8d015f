"""The whole run's configuration: pydantic models, YAML + dotted overrides, every default.

Nothing else in rayrl holds a default value; call sites read them from here.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rayrl.config_yaml import ConfigError, merge, parse_overrides, read_yaml  # noqa: F401 (parse_overrides: re-exported)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)  # no bool for an int, no "3" for 3


class ClusterConfig(_Section):
    n_nodes: int = Field(1, ge=1)
    n_gpus_per_node: int = Field(0, ge=0)


class SchedulerConfig(_Section):
    type: Literal["local", "ray"] = "local"  # local: a private Ray cluster; ray: join an existing one
    address: str = "auto"  # used when type == "ray"
    connect_timeout_s: float = Field(10.0, gt=0)  # type == "ray" with host:port: the head must answer within it
    include_dashboard: bool = True  # bound to dashboard_host; `ray list actors` needs it
    # local: every listener of the private cluster on 127.0.0.1 (Ray's single-machine mode); False binds
    # the node's address, for attaching other nodes to it
    loopback_only: bool = True
    dashboard_host: str = "127.0.0.1"


class ModelBuildConfig(_Section):
    """A small Qwen2-architecture model built offline, then warmed up on the task."""

    hidden_size: int = Field(128, ge=16)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(2, ge=1)
    num_kv_heads: int = Field(1, ge=1)
    head_dim: int = Field(64, ge=8)  # vLLM's CPU attention needs 64
    intermediate_size: int = Field(384, ge=16)
    max_position_embeddings: int = Field(256, ge=16)  # longest prompt + completion the built model takes
    warmup_steps: int = Field(230, ge=0)
    warmup_batch_size: int = Field(64, ge=1)
    warmup_lr: float = Field(2e-4, gt=0)
    seed: int = 0


class ModelConfig(_Section):
    path: str | None = None  # a local Hugging Face directory; None builds one from `build`
    backend: Literal["hf", "vllm"] = "hf"  # rollout engine: hf (pure torch) or vllm (AsyncLLM)
    build: ModelBuildConfig = ModelBuildConfig()
    cache_dir: str = "~/.cache/rayrl/models"
    # vLLM computes logits in fp32 from bf16 hidden states (its head_dtype), as the learners always score
    # tokens. Off, as in vLLM: it barely moved the bf16 log-prob gap on a Qwen2-1.5B-shaped check; it helps models
    # whose logits are large (bf16 rounds |logit| ~ 20 to steps of 1/8). No effect when vLLM runs in fp32
    lm_head_fp32: bool = False


class RolloutConfig(_Section):
    num_workers: int = Field(1, ge=1)
    cpus_per_worker: float = Field(1.0, gt=0)
    batch_size: int = Field(32, ge=1)  # prompts per training step; each yields group_size samples
    group_size: int = Field(8, ge=1)
    max_new_tokens: int = Field(6, ge=1)
    temperature: float = Field(0.7, gt=0)
    max_staleness: int = Field(1, ge=0)  # η; 0 is synchronous RL
    # the episode code: a Workflow class by import string (single-turn RLVR, multi-turn tool use, an
    # OpenAI-client agent, or your own)
    workflow: str = "rayrl.workflows.rlvr:SingleTurn"
    groups_per_call: int = Field(4, ge=1)  # prompts one lease from the buffer hands a worker; their episodes start together
    # hf engine: decode batches running at once; requests that arrive while all are busy join one batch.
    # 1: one larger batch beat parallel ones on 2 cores and left the learner its core (async_vs_sync at η = 2)
    max_concurrent_calls: int = Field(1, ge=1)
    prompt_lead_batches: int = Field(2, ge=1)  # prompt batches queued beyond what staleness admits
    queue_check_s: float = Field(1.0, gt=0)  # while waiting for a batch: how often the driver checks workers and prompts
    eval_temperature: float = Field(0.0, ge=0)  # held-out evaluation; 0 is greedy
    eval_samples_per_task: int = Field(1, ge=1)  # accuracy is the share of correct samples
    request_timeout_s: float = Field(600.0, gt=0)  # past it a request is aborted, returned with its partial tokens
    seed: int = 0  # each request samples from its own stream, seeded by this and its task id (exact resume)
    max_restarts: int = Field(3, ge=0)  # a dead rollout worker is restarted, rejoins and loads the current weights
    restart_timeout_s: float = Field(300.0, gt=0)  # a restarted worker (its engine built again) must answer within it
    # vLLM engine (model.backend=vllm)
    tensor_parallel_size: int = Field(1, ge=1)  # GPUs per rollout worker, through vLLM's Ray executor
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)  # on CPU vLLM reads it as a share of RAM
    kv_cache_gb: float | None = None  # fixed KV-cache size; None: from gpu_memory_utilization on GPU
    cpu_kv_cache_gb: float = Field(1.0, gt=0)  # KV-cache size on a CPU-only cluster when kv_cache_gb is None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: the checkpoint's dtype
    load_format: Literal["auto", "dummy"] = "auto"  # dummy: random weights, no files read (benchmarks)
    enforce_eager: bool = False  # skip CUDA graphs: faster start, slower decode
    max_num_seqs: int | None = None  # None: vLLM's offline-batch default for the hardware
    max_num_batched_tokens: int | None = None  # None: vLLM's offline-batch default for the hardware
    enable_prefix_caching: bool = True
    # a weight update preempts in-flight requests and recomputes their KV cache with the new weights;
    # False keeps the KV entries the old weights wrote (faster resume, slightly off-policy prefix)
    recompute_kv_on_sync: bool = True
    # vLLM batch-invariant and the learner on vLLM's kernels: rollout and learner log-probs equal bit for bit
    # (README, "Bitwise on-policy"); kv_block_size: vLLM's KV page, which the learner's attention reads alike
    bitwise_on_policy: bool = False
    kv_block_size: int = Field(16, ge=16)
    # training samples run to exactly max_new_tokens (benchmarks: fixed-length generations); evaluation still stops
    ignore_eos: bool = False


class RewardConfig(_Section):
    fn: str = "rayrl.rewards.arithmetic:exact_match"
    num_actors: int = Field(1, ge=1)
    timeout_s: float = Field(5.0, gt=0)  # per call, from its start; a call past it is abandoned
    max_threads: int = Field(4, ge=1)  # reward calls running at once per reward actor (and groups it scores at once)
    max_restarts: int = Field(3, ge=0)  # a dead reward actor is restarted; the groups it was scoring are retried
    # failures (raised, timed out, non-finite, wrong type) among the last failure_window samples scored:
    # past this share the run stops naming the function and the reasons, rather than train on zeros
    max_failure_fraction: float = Field(0.5, gt=0, le=1)
    failure_window: int = Field(256, ge=1)


class AgentConfig(_Section):
    """Multi-turn episodes: rollout.workflow=rayrl.workflows.multi_turn:ToolUse (built-in tool loop) or
    rayrl.workflows.openai_agent:OpenAIAgent (your agent function against the OpenAI-compatible gateway)."""

    tools: list[str] = ["rayrl.workflows.tools:calculator"]  # Tool objects by import string (ToolUse)
    max_turns: int = Field(4, ge=1)  # assistant turns per episode
    tool_timeout_s: float = Field(5.0, gt=0)  # a tool call past it becomes an error observation
    turn_discount: float = Field(1.0, ge=0, le=1)  # episode reward: sum over turns t of turn_discount**t * r_t
    system_prompt: str | None = None  # ToolUse: a system message before the task
    fn: str | None = None  # OpenAIAgent: 'pkg.module:agent', an async function (client, task) -> reward or None
    episode_timeout_s: float = Field(300.0, gt=0)  # an agent episode past it is cancelled and counted
    # the OpenAI-compatible endpoint (/v1/chat/completions), an HTTP server in a gateway actor; None: on
    # when the workflow needs it (OpenAIAgent). In a multi-node run, bind an address the rollout nodes reach
    gateway: bool | None = None
    gateway_host: str = "127.0.0.1"
    gateway_port: int = Field(0, ge=0, le=65535)  # 0: a free port
    session_timeout_s: float = Field(600.0, gt=0)  # a session idle for longer is closed and counted as abandoned

    def wants_gateway(self, workflow: str) -> bool:
        return self.gateway if self.gateway is not None else workflow.endswith(":OpenAIAgent")


class LearnerConfig(_Section):
    backend: Literal["torch", "fsdp", "deepspeed"] = "torch"  # torch: one plain rank, no sharding
    num_workers: int = Field(1, ge=1)  # ranks; one GPU each when cluster.n_gpus_per_node > 0
    cpus_per_worker: float = Field(1.0, gt=0)
    total_steps: int = Field(300, ge=1)
    # 2e-4 (the warm-up's rate) made short runs worse: Adam takes full-size steps on a sparse RL gradient
    # (early_dip: held-out 0.195 -> 0.080 after 40 steps at 2e-4, -> 0.295 at 5e-5; 400 steps reach the same)
    lr: float = Field(5e-5, gt=0)
    lr_warmup_steps: int = Field(0, ge=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"  # decay after warm-up, to 0 at total_steps
    # a step whose advantages, loss or gradient norm is not finite is never applied; skip: counted, the run
    # goes on; stop: the run stops naming the step and the cause
    nonfinite: Literal["skip", "stop"] = "skip"
    process_group_timeout_s: float = Field(600.0, gt=0)  # the ranks' collectives (nccl / gloo) give up after it
    weight_decay: float = Field(0.0, ge=0)
    adam_betas: tuple[float, float] = Field((0.9, 0.999), strict=False)  # AdamW of every backend (DeepSpeed's too); a YAML list
    adam_eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, gt=0)
    minibatches: int = Field(1, ge=1)  # optimizer steps per training batch
    max_tokens_per_micro_batch: int = Field(8192, ge=1)  # gradient accumulation over micro-batches
    # padding-free packing; None: packed on GPU (FlashAttention-2 varlen), padded on CPU, where eager
    # attention would build a dense [tokens × tokens] block-diagonal mask per micro-batch
    pack_sequences: bool | None = None
    # tokens whose fp32 logits exist at once when the learner scores tokens (forward and backward)
    logprob_chunk_tokens: int = Field(4096, ge=1)
    dtype: Literal["float32", "bfloat16"] = "float32"  # parameter dtype; gradients reduce in fp32
    zero_stage: Literal[2, 3] = 3  # deepspeed only
    cpu_offload: bool = False  # fsdp: CPUOffloadPolicy; deepspeed: offload optimizer state
    # optimizer state to host memory between steps, back for the next (colocate: room for the rollout engine)
    offload_optimizer: bool = False
    gpu_memory_fraction: float | None = Field(None, gt=0, le=1)  # caps the learner's share of its GPU; None: no cap
    activation_checkpointing: bool = False
    # torch.compile each decoder layer and the log-prob head's softmax arithmetic: fuses norms, rotary and
    # activations; the first steps pay the compile. Off by default: eager
    compile: bool = False
    seed: int = 0

    @model_validator(mode="after")
    def _ranks(self) -> "LearnerConfig":
        if self.backend == "torch" and self.num_workers > 1:
            raise ValueError("learner.backend=torch is one plain rank; for learner.num_workers > 1 use "
                             "learner.backend=fsdp or learner.backend=deepspeed")
        return self


ALGORITHM_ALIASES = {"DR-GRPO": "dr_grpo", "DR_GRPO": "dr_grpo", "REINFORCE++": "reinforce_pp"}  # spellings seen in the wild

# what each algorithm.type sets when its key is left at None: (clip_eps, clip_eps_high, loss_agg)
TYPE_DEFAULTS = {
    "grpo": (0.2, 0.2, "token_mean"),
    "dr_grpo": (0.2, 0.2, "seq_mean_token_sum_norm"),  # no length normalisation
    "dapo": (0.2, 0.28, "token_mean"),  # clip-higher
    "rloo": (0.2, 0.2, "token_mean"),
    "reinforce_pp": (0.2, 0.2, "token_mean"),
    "gspo": (3e-4, 4e-4, "seq_mean_token_mean"),  # the GSPO paper's sequence-ratio clip range
    "ppo": (0.2, 0.2, "token_mean"),
}


GROUP_RELATIVE = ("grpo", "dr_grpo", "dapo", "rloo", "gspo")  # types whose advantages need >= 2 samples a group


class AlgorithmConfig(_Section):
    """The advantage estimator and the policy loss. Keys left at None take algorithm.type's value from
    TYPE_DEFAULTS; the README's algorithm table says what each type is and when to choose it."""

    # grpo: group mean and std; dr_grpo: group mean only, loss divided by samples x max_new_tokens;
    # dapo: grpo with clip-higher (plus dynamic sampling, on for every type); rloo: leave-one-out mean;
    # reinforce_pp: batch-normalised token returns; gspo: grpo advantages, sequence-level ratio and clip;
    # ppo: GAE over a learned critic (a value-head model trained by a second learner group).
    # "DR-GRPO" is read as dr_grpo, "REINFORCE++" as reinforce_pp
    type: Literal["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "gspo", "ppo"] = "grpo"
    clip_eps: float | None = Field(None, gt=0)  # PPO clip, the low side: ratio >= 1 - clip_eps
    clip_eps_high: float | None = Field(None, gt=0)  # the high side (DAPO's clip-higher); None: the type's
    dual_clip: float | None = Field(None, gt=1)  # for negative advantages, the loss is at most dual_clip * |A|
    # token_mean: every token weighs the same; seq_mean_token_mean: each sequence's token mean, averaged;
    # seq_mean_token_sum_norm: token sums / (sequences x rollout.max_new_tokens); group_mean_token_mean: each
    # group's token mean, averaged over groups
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "group_mean_token_mean"] \
        | None = None
    entropy_coef: float = Field(0.0, ge=0)  # bonus: the loss subtracts entropy_coef x the token entropy
    # KL to the frozen reference; 0 skips the reference model. k1: log(p/ref), k2: (log(p/ref))^2 / 2,
    # k3: ref/p - 1 - log(ref/p); in the loss, or (kl_in_reward) subtracted from the reward, per token
    beta: float = Field(0.0, ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_in_reward: bool = False
    off_policy_correction: bool = True  # decoupled PPO: behaviour / proximal / current policies
    # the behaviour importance weight exp(proximal - behaviour), with off_policy_correction: mask drops
    # tokens (or sequences) outside [floor, cap] (masked IS, IcePop's band); truncate caps it at cap (TIS).
    # level token: a weight per token; sequence: the product over the sequence's tokens, for all of them
    behav_imp_weight_mode: Literal["mask", "truncate"] = "mask"
    behav_imp_weight_level: Literal["token", "sequence"] = "token"
    behav_imp_weight_cap: float = Field(5.0, gt=0)
    behav_imp_weight_floor: float = Field(0.0, ge=0)  # below it masked in either mode (truncate + floor: TIS and MIS)
    std_normalize: bool = True  # grpo, dapo and gspo
    # DAPO's dynamic sampling: groups whose rewards are all equal (no group-relative signal) are dropped,
    # counted, and the batch is filled from further prompts instead. On by default: without it short runs
    # got worse first (early_dip: 8 x 4 held-out 0.20 -> 0.10-0.18 after 60 steps; with it 0.24-0.25)
    dynamic_sampling: bool = True
    # DAPO's overlong shaping: overlong_filter leaves samples cut at max_new_tokens out of the loss; a soft
    # penalty falls linearly from 0 to -overlong_penalty over the last overlong_buffer tokens (0: off)
    overlong_filter: bool = False
    overlong_buffer: int = Field(0, ge=0)
    overlong_penalty: float = Field(1.0, ge=0)
    # ppo: generalised advantage estimation and the critic's value loss (clipped around the old values)
    gae_gamma: float = Field(1.0, ge=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    value_clip: float = Field(0.2, gt=0)
    critic_lr: float = Field(1e-4, gt=0)  # the critic's learning rate; the rest of learner.* applies to it too
    eps: float = Field(1e-6, gt=0)

    @field_validator("type", mode="before")
    @classmethod
    def _alias(cls, value):
        return ALGORITHM_ALIASES.get(value.upper(), value) if isinstance(value, str) else value

    def clip_range(self) -> tuple[float, float]:
        """(low, high) of the ratio clip, the type's defaults filling what is unset."""
        low, high, _ = TYPE_DEFAULTS[self.type]
        low = self.clip_eps if self.clip_eps is not None else low
        return low, self.clip_eps_high if self.clip_eps_high is not None else (high if self.clip_eps is None else low)

    def aggregation(self) -> str:
        return self.loss_agg or TYPE_DEFAULTS[self.type][2]


class SyncConfig(_Section):
    # gloo: CPU; nccl: GPU, vLLM's native engine (model.backend=vllm); ipc: learner and rollout engine on the
    # same GPU (placement.mode=colocate or share), CUDA IPC handles of packed buckets, written straight into the engine
    transport: Literal["gloo", "nccl", "ipc"] = "gloo"
    # the dtype weights travel in; learner: the learner's own (fp32 master weights); bfloat16 halves the bytes
    # a bf16 rollout engine would round them to anyway
    dtype: Literal["learner", "float32", "bfloat16", "float16"] = "learner"
    bucket_mb: float = Field(256.0, gt=0)  # packed-buffer size; vLLM warns of tensors bigger than it
    timeout_s: float = Field(120.0, gt=0)


class PlacementConfig(_Section):
    # colocate: rollout worker i and learner rank i share a device and take turns (synchronous, η = 0): the
    # rollout engine sleeps while the learner trains, wakes for the weight sync, then generates.
    # share: they share a device and run at once (any η); memory is split by rollout.gpu_memory_utilization
    # and learner.gpu_memory_fraction, compute by the device's own scheduling
    mode: Literal["split", "colocate", "share"] = "split"
    # colocate: what the sleeping engine lets go of. 1: weights to host memory, KV cache freed;
    # 2: weights and KV cache freed (the sync rewrites every weight anyway)
    sleep_level: Literal[1, 2] = 2
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    service_cpus: float = Field(0.5, gt=0)  # one bundle shared by the reward actors, buffer, broadcaster
    ready_timeout_s: float = Field(60.0, gt=0)  # the placement group must be placed within it, or the run stops
    # node labels the role's bundles must land on (Ray's bundle_label_selector), e.g. {"rayrl-role": "learner"}
    # with nodes started as `ray start --labels='{"rayrl-role": "learner"}'`; empty: any node
    rollout_node_labels: dict[str, str] = {}
    learner_node_labels: dict[str, str] = {}


class DataConfig(_Section):
    # word_problems: arithmetic in words, for a calculator-tool agent (chat template, tool calls)
    task: Literal["arithmetic", "gsm8k", "word_problems"] = "arithmetic"
    path: str | None = None  # gsm8k: a local jsonl of {"question", "answer"}; None reads hf_dataset
    hf_dataset: str = "openai/gsm8k"
    ops: list[Literal["+", "-", "*"]] = ["+"]
    min_operand: int = 0
    max_operand: int = 49
    eval_size: int = Field(200, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _range(self) -> "DataConfig":
        if self.max_operand < self.min_operand:
            raise ValueError(f"max_operand ({self.max_operand}) must be >= min_operand ({self.min_operand})")
        return self


class CheckpointConfig(_Section):
    save_final: bool = True  # HF export of the trained policy into the run directory
    every_steps: int = Field(0, ge=0)  # a resumable checkpoint every N steps; 0: none
    keep: int = Field(2, ge=1)  # the newest complete checkpoints kept
    dir: str | None = None  # None: <run directory>/checkpoints
    # auto: continue the newest complete checkpoint of this run, if any; never: a rerun of the same name
    # starts a new run directory beside it; or the path of one checkpoint
    resume: str = "auto"


class MetricsConfig(_Section):
    run_dir: str = "runs"
    run_name: str | None = None
    progress: bool = True
    eval_every_steps: int = Field(0, ge=0)  # held-out accuracy every N steps into metrics.jsonl; 0: before and after only
    wandb: bool = False
    wandb_project: str = "rayrl"
    wandb_mode: Literal["offline", "online"] = "offline"  # online needs a logged-in wandb (WANDB_API_KEY)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"  # the "rayrl" logger, driver and actors


class Config(_Section):
    """The whole run: one section per concern, each defaulting to its own defaults."""

    # where it runs
    cluster: ClusterConfig = ClusterConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    placement: PlacementConfig = PlacementConfig()
    # what it learns from
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    reward: RewardConfig = RewardConfig()
    # how it learns
    rollout: RolloutConfig = RolloutConfig()
    agent: AgentConfig = AgentConfig()
    learner: LearnerConfig = LearnerConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    sync: SyncConfig = SyncConfig()
    # what it keeps
    checkpoint: CheckpointConfig = CheckpointConfig()
    metrics: MetricsConfig = MetricsConfig()

    @model_validator(mode="after")
    def _engines_fit(self) -> "Config":
        gpus = self.cluster.n_gpus_per_node > 0
        if self.sync.transport == "nccl" and not (gpus and self.model.backend == "vllm"):
            raise ValueError("sync.transport=nccl needs GPUs (cluster.n_gpus_per_node > 0) and model.backend=vllm; "
                             "on CPU or with model.backend=hf use sync.transport=gloo")
        alg, group = self.algorithm, self.rollout.group_size
        if group < 2 and alg.type in GROUP_RELATIVE:
            raise ValueError(f"algorithm.type={alg.type} compares the samples of a group: rollout.group_size must be "
                             f">= 2 (got {group}); for one sample per prompt use algorithm.type=reinforce_pp or ppo")
        if group < 2 and alg.dynamic_sampling:
            raise ValueError("algorithm.dynamic_sampling drops groups whose rewards are all equal, which with "
                             "rollout.group_size=1 is every group; set algorithm.dynamic_sampling=false")
        if self.algorithm.overlong_buffer >= self.rollout.max_new_tokens:
            raise ValueError(f"algorithm.overlong_buffer ({self.algorithm.overlong_buffer}) must be below "
                             f"rollout.max_new_tokens ({self.rollout.max_new_tokens})")
        if self.rollout.workflow.endswith(":OpenAIAgent") and not self.agent.fn:
            raise ValueError("rollout.workflow=...:OpenAIAgent runs agent.fn; set agent.fn='package.module:agent' "
                             "(an async function (client, task) -> reward or None)")
        if self.placement.mode == "colocate" and self.rollout.max_staleness != 0:
            raise ValueError(f"placement.mode=colocate takes turns on each device (the rollout engine sleeps while "
                             f"the learner trains), so generation never overlaps training: set rollout.max_staleness=0 "
                             f"(got {self.rollout.max_staleness}), or placement.mode=split for asynchronous RL")
        if self.sync.transport == "ipc" and not (gpus and self.placement.mode in ("colocate", "share")):
            raise ValueError("sync.transport=ipc hands weights over inside one GPU: it needs GPUs "
                             "(cluster.n_gpus_per_node > 0) and placement.mode=colocate or share; otherwise use nccl "
                             "or gloo")
        if self.placement.mode == "share" and gpus and self.model.backend == "vllm" and self.sync.transport == "nccl":
            raise ValueError("placement.mode=share puts the learner and the rollout engine on one GPU, where NCCL "
                             "cannot form a group (one device, two ranks): set sync.transport=ipc")
        share_gpu = self.rollout.gpu_memory_utilization + (self.learner.gpu_memory_fraction or 1.0)
        if self.placement.mode == "share" and gpus and share_gpu > 1.0:
            raise ValueError(f"placement.mode=share splits each GPU's memory: rollout.gpu_memory_utilization "
                             f"({self.rollout.gpu_memory_utilization}) + learner.gpu_memory_fraction "
                             f"({self.learner.gpu_memory_fraction}; unset counts as 1) must be at most 1 (got {share_gpu:.2f})")
        if self.sync.transport == "ipc" and self.rollout.num_workers > 1:
            raise ValueError(f"sync.transport=ipc hands learner rank 0's weights to the rollout engine on its own GPU "
                             f"only: it needs rollout.num_workers=1 (got {self.rollout.num_workers}); with more GPUs "
                             "use placement.mode=split and sync.transport=nccl")
        if self.learner.offload_optimizer and self.learner.backend == "deepspeed":
            raise ValueError("learner.offload_optimizer moves torch/fsdp optimizer state; with learner.backend="
                             "deepspeed use learner.cpu_offload (ZeRO offload)")
        if self.rollout.tensor_parallel_size > 1 and not (gpus and self.model.backend == "vllm"):
            raise ValueError("rollout.tensor_parallel_size > 1 needs model.backend=vllm and GPUs "
                             "(cluster.n_gpus_per_node > 0)")
        r, lc = self.rollout, self.learner
        bitwise_needs = {"model.backend=vllm": self.model.backend == "vllm", "cluster.n_gpus_per_node > 0": gpus,
                         "rollout.enforce_eager=true": r.enforce_eager, "rollout.dtype=bfloat16": r.dtype == "bfloat16",
                         "rollout.tensor_parallel_size=1": r.tensor_parallel_size == 1,
                         "learner.dtype=bfloat16": lc.dtype == "bfloat16", "learner.compile=false": not lc.compile,
                         "learner.backend=fsdp or torch": lc.backend in ("fsdp", "torch"),
                         "learner.num_workers=1": lc.num_workers == 1, "model.lm_head_fp32=false": not self.model.lm_head_fp32}
        if r.bitwise_on_policy and not all(bitwise_needs.values()):
            raise ValueError("rollout.bitwise_on_policy=true is verified for one learner rank on vLLM's eager bf16 "
                             "kernels; set " + ", ".join(k for k, ok in bitwise_needs.items() if not ok))
        return self


def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(_known_keys(ann, f"{prefix}{name}."))
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _explain(err: ValidationError) -> str:
    known = _known_keys(Config)
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            lines.append(f"unknown config key '{key}'{hint}")
        elif e["type"] == "value_error" and isinstance(e.get("input"), dict):  # a rule across several keys
            lines.append(e["msg"].removeprefix("Value error, "))
        else:
            lines.append(f"bad value for '{key}': {e['msg']} (got {e.get('input')!r})")
    return "invalid config:\n  " + "\n  ".join(lines)


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML file (optional), apply dotted overrides, validate; raise ConfigError naming the key."""
    tree: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file '{path}' " + ("is not a file" if p.exists() else "does not exist"))
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as err:
            raise ConfigError(f"config file '{path}' cannot be read as UTF-8 text ({err})") from None
        tree = read_yaml(text, f"config file '{path}'") or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"config file '{path}' must hold a mapping of sections, got {type(tree).__name__}")
    tree = merge(tree, parse_overrides(overrides or []))
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))

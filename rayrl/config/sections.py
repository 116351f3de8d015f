"""The run's sections: a pydantic model per component, every default described."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rayrl.config.section import F, Section


class ClusterConfig(Section):
    """The machines the run expects."""

    n_nodes: int = F(1, "Nodes in the cluster.", ge=1)
    n_gpus_per_node: int = F(0, "GPUs per node; 0 runs everything on CPUs.", ge=0)


class SchedulerConfig(Section):
    """Where Ray runs."""

    type: Literal["local", "ray"] = F("local", "local: a private Ray cluster for this run; ray: join a running one.")
    address: str = F("auto", "The cluster to join when type=ray: 'auto', host:port of the head, or ray://...")
    connect_timeout_s: float = F(10.0, "type=ray with host:port: the head must answer within it.", gt=0)
    include_dashboard: bool = F(True, "Start Ray's dashboard (on dashboard_host); `ray list actors` needs it.")
    loopback_only: bool = F(True, "local: every listener on 127.0.0.1; false: the node's address (to add nodes).")
    dashboard_host: str = F("127.0.0.1", "The address the dashboard listens on.")


class PlacementConfig(Section):
    """Which device each role uses."""

    mode: Literal["split", "colocate", "share"] = F("split", "split: rollout and learner on own devices; colocate: "
                                                    "worker i, rank i share one, in turns (η = 0); share: at once.")
    sleep_level: Literal[1, 2] = F(2, "colocate: 1: the sleeping vLLM keeps weights in host memory; 2: frees them.")
    rollouts_per_gpu: int = F(1, "share: rollout workers per GPU, each its own engine and memory share (a small "
                              "model's vLLM is bound by its host process: more engines, more cores).", ge=1)
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = F("PACK", "Ray's placement group strategy.")
    service_cpus: float = F(0.5, "The bundle shared by reward actors, buffer and broadcaster.", gt=0)
    ready_timeout_s: float = F(60.0, "The placement group must be placed within it, or the run stops.", gt=0)
    rollout_node_labels: dict[str, str] = F({}, "Node labels the rollout bundles need, e.g. {rayrl-role: rollout}.")
    learner_node_labels: dict[str, str] = F({}, "Node labels the learner bundles must land on; empty: any node.")


class ModelConfig(Section):
    """The policy to train."""

    path: str | None = F(None, "A local Hugging Face model directory; unset: build the small demo model (demo.*).")


class DemoConfig(Section):
    """The small Qwen2-architecture model built offline when model.path is unset, warmed up on the task."""

    hidden_size: int = F(128, "Hidden size.", ge=16)
    num_layers: int = F(2, "Decoder layers.", ge=1)
    num_heads: int = F(2, "Attention heads.", ge=1)
    num_kv_heads: int = F(1, "Key/value heads.", ge=1)
    head_dim: int = F(64, "Head dimension (vLLM's CPU attention needs 64).", ge=8)
    intermediate_size: int = F(384, "MLP width.", ge=16)
    max_position_embeddings: int = F(256, "Longest prompt + completion the built model takes.", ge=16)
    warmup_steps: int = F(230, "Supervised warm-up steps on the task before RL.", ge=0)
    warmup_batch_size: int = F(64, "Warm-up batch size.", ge=1)
    warmup_lr: float = F(2e-4, "Warm-up learning rate.", gt=0)
    judge_warmup_steps: int = F(3000, "Supervised steps of the demo judge or scorer on synthetic verdicts.", ge=0)
    judge_warmup_lr: float = F(3e-4, "Their learning rate (1e-3 stalled at 0.7 of held-out verdicts right).", gt=0)
    seed: int = F(0, "Initialisation and warm-up seed.")
    device: Literal["cpu", "cuda"] = F("cpu", "Where the warm-up runs; cuda (bf16 autocast) for the larger shapes.")
    vision_depth: int = F(2, "visual_arithmetic: the vision tower's blocks.", ge=1)
    vision_dim: int = F(32, "visual_arithmetic: the vision tower's width.", ge=8)
    cache_dir: str = F("~/.cache/rayrl/models", "Built models are cached here by a hash of their settings.")


class DataConfig(Section):
    """The task's prompts and answers."""

    task: Literal["arithmetic", "gsm8k", "word_problems", "visual_arithmetic"] = F(
        "arithmetic", "sums; gsm8k; word_problems (agent); visual_arithmetic (the sum drawn in an image).")
    path: str | None = F(None, "gsm8k: a local JSONL of {question, answer} lines; unset reads hf_dataset.")
    hf_dataset: str = F("openai/gsm8k", "gsm8k without path: the Hugging Face dataset.")
    ops: list[Literal["+", "-", "*"]] = F(["+"], "arithmetic: the operations (at least one).", min_length=1)
    min_operand: int = F(0, "arithmetic, word_problems: smallest operand.")
    max_operand: int = F(49, "arithmetic, word_problems: largest operand.")
    answer_copies: int = F(1, "arithmetic: the answer written this many times, space-separated (long answers).", ge=1)
    eval_size: int = F(200, "Problems held out for evaluation.", ge=1)
    seed: int = F(0, "The train / held-out split and the prompt order.")

    @model_validator(mode="after")
    def _consistent(self) -> "DataConfig":
        if self.max_operand < self.min_operand:
            raise ValueError(f"data.max_operand ({self.max_operand}) must be >= data.min_operand ({self.min_operand})")
        if self.path is not None and self.task != "gsm8k":
            raise ValueError(f"data.path={self.path} is read only by data.task=gsm8k; data.task={self.task} builds "
                             "its problems itself: set data.task=gsm8k, or drop data.path")
        return self


class ServedModelConfig(Section):
    """A frozen model served by actors of its own, beside the rollout or in bundles of its own: what a reward
    model and a teacher share."""

    num_actors: int = F(1, "Actors serving the model.", ge=1)
    placement: Literal["own", "rollout"] = F("own", "own: bundles of their own; rollout: inside rollout worker i's.")
    cpus: float = F(1.0, "CPUs per actor; its torch threads on CPU.", gt=0)
    gpu_fraction: float = F(1.0, "own: GPUs per actor; rollout: the share of the worker's GPU.", gt=0, le=1)
    gpu_memory_utilization: float = F(0.2, "A vLLM engine's share of its GPU's memory.", gt=0, lt=1)
    timeout_s: float = F(60.0, "Per reward actor call; past it the samples are counted unscored.", gt=0)
    max_restarts: int = F(3, "A dead actor is restarted; its calls are retried.", ge=0)


class TeacherConfig(ServedModelConfig):
    """On-policy distillation: a frozen teacher scores every sampled token of the student (docs: Distillation)."""

    enabled: bool = F(False, "Score each sample's completion tokens with the teacher; the loss follows algorithm.")
    path: str | None = F(None, "A local Hugging Face model with the policy's tokenizer (needed when enabled).")
    engine: str = F("hf", "hf (plain torch), vllm (prompt log-probs; the vllm section's settings), or module:Class "
                          "of a teacher engine (rayrl.engines.registry).")


class RewardModelConfig(ServedModelConfig):
    """A frozen reward model beside the rule (reward.fn) in actors of its own (docs: Reward models)."""

    kind: Literal["none", "judge", "scorer"] = F("none", "judge: a parsed verdict; scorer: a scalar head.")
    path: str | None = F(None, "A local Hugging Face model; unset: the demo judge or scorer built for data.task.")
    engine: Literal["hf", "vllm"] = F("hf", "The judge's engine (its settings from the hf or vllm section).")
    template: str = F("Question: {prompt}\nReference: {reference}\nAnswer: {answer}\nCorrect?", "Needs {answer}.")
    chat_template: bool = F(False, "Wrap the rendered template as a user turn in the tokenizer's chat template.")
    parser: str = F("rayrl.rewards.verdicts:yes_probability", "(verdict sample) -> score; a ValueError: unparsable.")
    votes: int = F(1, "Judge samples per answer; the score is their mean.", ge=1)
    temperature: float = F(0.0, "The judge's sampling temperature; 0 is greedy.", ge=0)
    max_new_tokens: int = F(1, "The verdict's length.", ge=1)
    combine: Literal["only", "sum", "fallback"] = F("sum", "weight · score alone, plus the rule, or where it is None.")
    weight: float = F(1.0, "The model score's weight in the reward.")


class RewardConfig(Section):
    """The reward function and the actors that call it."""

    fn: str = F("rayrl.rewards.arithmetic:exact_match", "'module:function' of (sample, task): float or RewardResult.")
    model: RewardModelConfig = RewardModelConfig()
    num_actors: int = F(1, "Reward actors.", ge=1)
    timeout_s: float = F(5.0, "Per call, from its start; a call past it is abandoned and counted.", gt=0)
    max_threads: int = F(4, "Reward calls running at once per reward actor.", ge=1)
    max_restarts: int = F(3, "A dead reward actor is restarted; the groups it was scoring are retried.", ge=0)
    max_failure_fraction: float = F(0.5, "The failed share of the last failure_window samples: stop.", gt=0, le=1)
    failure_window: int = F(256, "Samples the failure fraction is taken over.", ge=1)
    max_failing_s: float = F(45.0, "Every sample scored for this long failed (however slowly): the run stops.", gt=0)


class RolloutConfig(Section):
    """The rollout loop: workers, sampling, staleness, faults."""

    engine: Literal["hf", "vllm"] = F("hf", "hf: pure torch (the CPU default; section hf); vllm: section vllm.")
    num_workers: int = F(1, "Rollout workers.", ge=1)
    cpus_per_worker: float = F(1.0, "CPUs per rollout worker; its torch threads on CPU.", gt=0)
    batch_size: int = F(32, "Prompts per training step; each yields group_size samples.", ge=1)
    group_size: int = F(8, "Samples per prompt.", ge=1)
    max_new_tokens: int = F(6, "Tokens per completion at most.", ge=1)
    temperature: float = F(0.7, "Sampling temperature of training samples.", gt=0)
    max_staleness: int = F(1, "η: how many policy versions a trained sample may lag; 0 is synchronous RL.", ge=0)
    workflow: str = F("rayrl.workflows.rlvr:SingleTurn", "The episode code: a Workflow class by import string.")
    groups_per_call: int = F(4, "Prompts a worker leases at once; their episodes start together.", ge=1)
    prompt_lead_batches: int = F(2, "Prompt batches queued beyond what staleness admits.", ge=1)
    max_idle_batches: int = F(10, "Batches' worth of finished groups with none trainable: the run stops, naming why.",
                              ge=1)
    min_idle_groups: int = F(512, "The least finished groups, none trainable, that stop a run (small batches).", ge=1)
    stall_s: float = F(30.0, "A batch awaited this long with nothing generating or admissible stops the run.", gt=0)
    queue_check_s: float = F(1.0, "While waiting for a batch: how often the driver checks workers and prompts.", gt=0)
    request_timeout_s: float = F(600.0, "Past it a request is aborted and returned with its partial tokens.", gt=0)
    seed: int = F(0, "Each request samples from its own stream, seeded by this and its task id (exact resume).")
    max_restarts: int = F(3, "A dead rollout worker is restarted, rejoins and loads the current weights.", ge=0)
    restart_timeout_s: float = F(300.0, "A restarted worker (its engine built again) must answer within it.", gt=0)
    fleet: Literal["fixed", "elastic"] = F("fixed", "elastic: workers join new nodes, leave drained or lost ones.")
    max_workers: int = F(0, "fleet=elastic: the most workers (num_workers, in the placement group, the least).", ge=0)
    fleet_check_s: float = F(2.0, "fleet=elastic: how often the driver looks at the cluster's nodes.", gt=0)
    idle_leave_s: float = F(60.0, "fleet=elastic, η > 0: workers idle this long: a joined one leaves (0: never).", ge=0)
    ignore_eos: bool = F(False, "Training samples run to exactly max_new_tokens (benchmarks); not evaluation.")
    bitwise_on_policy: bool = F(False, "Rollout and learner log-probs equal bit for bit (docs: Bitwise on-policy).")


class EvalConfig(Section):
    """Held-out evaluation."""

    temperature: float = F(0.0, "Sampling temperature; 0 is greedy.", ge=0)
    samples_per_task: int = F(1, "Samples per held-out task; accuracy is the share of correct samples.", ge=1)
    every_steps: int = F(0, "Held-out accuracy every N steps into metrics.jsonl; 0: before and after only.", ge=0)


class HFConfig(Section):
    """The hf rollout engine (rollout.engine=hf): pure torch."""

    max_concurrent_calls: int = F(1, "Decode batches at once; requests arriving meanwhile join one batch.", ge=1)


class VLLMConfig(Section):
    """The vLLM rollout engine (rollout.engine=vllm)."""

    tensor_parallel_size: int = F(1, "GPUs per rollout worker, through vLLM's Ray executor.", ge=1)
    max_model_len: int | None = F(None, "Prompt + completion tokens; unset: the model's max_position_embeddings.")
    gpu_memory_utilization: float = F(0.85, "vLLM's share of its GPU (on CPU, of RAM).", gt=0, le=1)
    kv_cache_gb: float | None = F(None, "A fixed KV-cache size; unset: from gpu_memory_utilization on GPU.")
    cpu_kv_cache_gb: float = F(1.0, "KV-cache size on a CPU-only cluster when kv_cache_gb is unset.", gt=0)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = F("auto", "auto: the checkpoint's dtype.")
    load_format: Literal["auto", "dummy"] = F("auto", "dummy: random weights, no files read (benchmarks).")
    enforce_eager: bool = F(False, "Skip CUDA graphs: faster start, slower decode.")
    max_num_seqs: int | None = F(None, "Sequences per engine step; unset: vLLM's offline-batch default.")
    max_num_batched_tokens: int | None = F(None, "Tokens per engine step; unset: vLLM's offline-batch default.")
    enable_prefix_caching: bool = F(True, "vLLM's prefix cache (reset at every weight update).")
    recompute_kv_on_sync: bool = F(True, "A weight update recomputes in-flight requests' KV cache (false: kept).")
    kv_block_size: int = F(16, "vLLM's KV page (bitwise on-policy: the learner's attention reads alike).", ge=16)
    lm_head_fp32: bool = F(False, "Logits in fp32 from bf16 hidden states, as the learners score tokens.")
    max_images_per_prompt: int = F(4, "Vision-language models: images one request may carry (vLLM sizes its encoder "
                                      "cache for it); videos: none.", ge=1)


class AgentConfig(Section):
    """Multi-turn episodes: the built-in tool loop or an OpenAI-client agent through the gateway."""

    tools: list[str] = F(["rayrl.workflows.tools:calculator"], "Tool objects by import string (ToolUse).")
    max_turns: int = F(4, "Assistant turns per episode.", ge=1)
    tool_timeout_s: float = F(5.0, "A tool call past it becomes an error observation.", gt=0)
    turn_discount: float = F(1.0, "Episode reward: the sum over turns t of turn_discount**t * r_t.", ge=0, le=1)
    system_prompt: str | None = F(None, "ToolUse: a system message before the task.")
    fn: str | None = F(None, "OpenAIAgent: 'pkg.module:agent', an async function (client, task) -> reward or None.")
    episode_timeout_s: float = F(300.0, "An agent episode past it is cancelled and counted.", gt=0)
    gateway: bool | None = F(None, "The OpenAI-compatible endpoint; unset: on when the workflow needs it.")
    gateway_host: str = F("127.0.0.1", "The gateway's address; in a multi-node run, one the rollout nodes reach.")
    gateway_port: int = F(0, "0: a free port.", ge=0, le=65535)
    session_timeout_s: float = F(600.0, "A session idle for longer is closed and counted as abandoned.", gt=0)

    def wants_gateway(self, workflow: str) -> bool:
        return self.gateway if self.gateway is not None else workflow.endswith(":OpenAIAgent")


class LearnerConfig(Section):
    """The learner group: backend, ranks, optimizer, memory."""

    backend: Literal["torch", "fsdp", "deepspeed"] = F("torch", "torch: one plain rank; fsdp: FSDP2; deepspeed: ZeRO.")
    num_workers: int = F(1, "Ranks; one GPU each when cluster.n_gpus_per_node > 0.", ge=1)
    cpus_per_worker: float = F(1.0, "CPUs per rank (its placement bundle).", gt=0)
    threads: int | None = F(None, "CPU torch threads per rank; unset: rollout's idle cores in its last training.", ge=1)
    total_steps: int = F(300, "Training steps.", ge=1)
    lr: float = F(5e-5, "Learning rate (AdamW).", gt=0)
    lr_warmup_steps: int = F(0, "Linear warm-up steps.", ge=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = F("constant", "Decay after warm-up, to 0 at total_steps.")
    nonfinite: Literal["skip", "stop"] = F("skip", "A non-finite step is never applied; skip: counted; stop: stop.")
    process_group_timeout_s: float = F(600.0, "The ranks' collectives give up after it.", gt=0)
    failover: bool | None = F(None, "A rank that dies: the group re-forms from in-memory copies of its training "
                              "state and the run goes on; unset: on with more than one rank.")
    failover_every_steps: int = F(10, "Steps between the in-memory copies (a death retrains the steps since).", ge=1)
    failover_max_recoveries: int = F(3, "Rank deaths one run recovers from in memory; one more stops it.", ge=0)
    weight_decay: float = F(0.0, "AdamW weight decay.", ge=0)
    adam_betas: tuple[float, float] = Field((0.9, 0.999), strict=False, description="AdamW betas (a YAML list).")
    adam_eps: float = F(1e-8, "AdamW epsilon.", gt=0)
    adam_fused: bool | None = F(None, "AdamW as one fused kernel (else torch's default); unset: fused on CUDA.")
    grad_clip: float = F(1.0, "Gradient-norm clip.", gt=0)
    minibatches: int = F(1, "Optimizer steps per training batch (policy and PPO critic), each on an even share "
                            "of a rank's groups.", ge=1)
    max_tokens_per_micro_batch: int = F(8192, "Micro-batches of at most this many tokens (one sequence fits).", ge=1)
    pack_sequences: bool | None = F(None, "Padding-free packing; unset: packed on GPU (varlen attention), padded.")
    share_prompts: bool | None = F(None, "A group's prompt run once per padded row (CPU); unset: on where allowed.")
    train_vision: bool = F(False, "Vision-language policies: train the vision tower too (frozen by default).")
    logprob_chunk_tokens: int = F(4096, "fp32 logit rows at once when scoring (one chunk: kept for backward).", ge=1)
    dtype: Literal["float32", "bfloat16"] = F("float32", "bfloat16: bf16 compute, fp32 masters and reductions.")
    zero_stage: Literal[2, 3] = F(3, "DeepSpeed's ZeRO stage.")
    cpu_offload: bool = F(False, "fsdp: CPUOffloadPolicy; deepspeed: optimizer state offload.")
    offload_optimizer: bool = F(False, "Optimizer state to host memory between steps (colocate: room for vLLM).")
    gpu_memory_fraction: float | None = F(None, "Caps the learner's share of its GPU; unset: no cap.", gt=0, le=1)
    activation_checkpointing: bool = F(False, "Recompute activations in the backward pass.")
    compile: bool = F(False, "torch.compile each decoder layer and the log-prob head (the first steps pay it).")
    seed: int = F(0, "Initialisation and sampling seed of the learner (and the vLLM engine).")

    @model_validator(mode="after")
    def _ranks(self) -> "LearnerConfig":
        if self.backend == "torch" and self.num_workers > 1:
            raise ValueError("learner.backend=torch is one rank; more need learner.backend=fsdp or deepspeed")
        if self.failover and self.num_workers < 2:
            raise ValueError("learner.failover=true keeps each rank's copy on a peer rank: it needs learner.num_workers "
                             f">= 2 (got {self.num_workers})")
        return self

    @property
    def fails_over(self) -> bool:
        """learner.failover, unset meaning on with more than one rank."""
        return self.num_workers > 1 if self.failover is None else self.failover


class LoraConfig(Section):
    """LoRA adapters (PEFT) on a frozen base, trained, synced and sampled with (the learner and the engines read it)."""

    enabled: bool = F(False, "Train LoRA adapters on a frozen base instead of every weight.")
    rank: int = F(16, "The adapters' rank r.", ge=1)
    alpha: float = F(32.0, "The update is alpha / rank · B·A.", gt=0)
    dropout: float = F(0.0, "Dropout on the adapters' input, in training.", ge=0, lt=1)
    target_modules: list[str] = F(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                                  "Linear layers that get an adapter.", min_length=1)
    base_dtype: Literal["float32", "bfloat16"] = F("float32", "The learner's frozen base; adapters and Adam stay fp32.")
    vllm_sync: Literal["in_place", "reload"] = F("in_place", "vLLM: adapters written into its LoRA slot, or reloaded.")


ALGORITHM_ALIASES = {"DR-GRPO": "dr_grpo", "DR_GRPO": "dr_grpo", "REINFORCE++": "reinforce_pp"}
# what each algorithm.type sets when its key is left unset: (clip_eps, clip_eps_high, loss_agg)
TYPE_DEFAULTS = {"grpo": (0.2, 0.2, "token_mean"), "dr_grpo": (0.2, 0.2, "seq_mean_token_sum_norm"),
                 "dapo": (0.2, 0.28, "token_mean"), "rloo": (0.2, 0.2, "token_mean"), "ppo": (0.2, 0.2, "token_mean"),
                 "reinforce_pp": (0.2, 0.2, "token_mean"), "gspo": (3e-4, 4e-4, "seq_mean_token_mean")}
GROUP_RELATIVE = ("grpo", "dr_grpo", "dapo", "rloo", "gspo")  # types whose advantages need >= 2 samples a group


class AlgorithmConfig(Section):
    """The advantage estimator and the policy loss; keys left unset take algorithm.type's value."""

    type: Literal["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "gspo", "ppo"] = F(
        "grpo", "grpo: group mean and std; dr_grpo: group mean only; dapo: clip-higher; rloo: leave-one-out; "
                "reinforce_pp: batch-normalised returns; gspo: sequence-level ratio; ppo: GAE over a critic.")
    clip_eps: float | None = F(None, "PPO clip, the low side: ratio >= 1 - clip_eps.", gt=0)
    clip_eps_high: float | None = F(None, "The high side (DAPO's clip-higher); unset: the type's.", gt=0)
    dual_clip: float | None = F(None, "For negative advantages the loss is at most dual_clip * |A|.", gt=1)
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "group_mean_token_mean"] \
        | None = F(None, "How token losses are averaged; unset: the type's.")
    entropy_coef: float = F(0.0, "The loss subtracts entropy_coef x the token entropy.", ge=0)
    beta: float = F(0.0, "KL to the frozen reference; 0 skips the reference model.", ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = F("k3", "k1: log(p/ref); k2: (log(p/ref))^2 / 2; k3: ref/p - 1 - log.")
    kl_in_reward: bool = F(False, "Subtract the KL from the reward instead of adding it to the loss.")
    off_policy_correction: bool = F(True, "Decoupled PPO: behaviour, proximal and current policies.")
    behav_imp_weight_mode: Literal["mask", "truncate"] = F("mask", "Outside [floor, cap]: mask or truncate.")
    behav_imp_weight_level: Literal["token", "sequence"] = F("token", "A weight per token, or the sequence's product.")
    behav_imp_weight_cap: float = F(5.0, "The behaviour weight's cap.", gt=0)
    behav_imp_weight_floor: float = F(0.0, "Below it a token is masked in either mode.", ge=0)
    std_normalize: bool = F(True, "grpo, dapo, gspo: divide advantages by the group's std.")
    advantage_std_eps: float = F(1e-6, "Added to a standard deviation before advantages are divided by it.", gt=0)
    dynamic_sampling: bool = F(True, "Groups whose rewards are all equal are dropped (counted); more prompts fill in.")
    overlong_filter: bool = F(False, "Samples cut at max_new_tokens leave the loss.")
    overlong_buffer: int = F(0, "A penalty falls linearly over the last overlong_buffer tokens (0: off).", ge=0)
    overlong_penalty: float = F(1.0, "The soft overlong penalty at max_new_tokens.", ge=0)
    gae_gamma: float = F(1.0, "ppo: discount.", ge=0, le=1)
    gae_lambda: float = F(0.95, "ppo: GAE lambda.", ge=0, le=1)
    value_clip: float = F(0.2, "ppo: the value loss is clipped around the old values.", gt=0)
    critic_lr: float = F(1e-4, "ppo: the critic's learning rate (the rest of learner.* applies to it too).", gt=0)
    reward_coef: float = F(1.0, "teacher.enabled: the task reward's advantage is weighted by it (0: distillation only).",
                           ge=0)
    distill_coef: float = F(1.0, "teacher.enabled: weight of each token's teacher - student log-prob (reverse KL).",
                            ge=0)

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


class SyncConfig(Section):
    """Weight sync from the learner to the rollout engines."""

    transport: str = F("gloo", "gloo: CPU; nccl: GPUs; ipc: both sides on one GPU; or a TransportPlan by import "
                               "string (module:NAME, docs/design.md).")
    dtype: Literal["learner", "float32", "bfloat16", "float16"] = F("learner", "The dtype weights travel in.")
    bucket_mb: float = F(256.0, "Packed-buffer size.", gt=0)
    timeout_s: float = F(120.0, "Each part of a sync must finish within it.", gt=0)


class CheckpointConfig(Section):
    """Resumable checkpoints and the final export."""

    save_final: bool = F(True, "Hugging Face export of the trained policy into the run directory.")
    every_steps: int | None = F(None, "A checkpoint every N steps; 0: none; unset: by time (every_minutes).", ge=0)
    every_minutes: float = F(10.0, "every_steps unset: a checkpoint after step 1, then this often.", gt=0)
    keep: int = F(2, "The newest complete checkpoints kept.", ge=1)
    dir: str | None = F(None, "Unset: <run directory>/checkpoints.")
    resume: str = F("auto", "auto: continue this run's newest checkpoint; never: start anew; or a checkpoint path.")


class MetricsConfig(Section):
    """What the run writes and shows."""

    run_dir: str = F("runs", "Run directories go here.")
    run_name: str | None = F(None, "Unset: the start time.")
    progress: bool = F(True, "A progress bar.")
    wandb: bool = F(False, "Log to Weights & Biases.")
    wandb_project: str = F("rayrl", "The wandb project.")
    wandb_mode: Literal["offline", "online"] = F("offline", "online needs a logged-in wandb.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = F("INFO", "The 'rayrl' logger, driver and actors.")

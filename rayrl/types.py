"""msgspec structs for everything that crosses an actor boundary."""

from __future__ import annotations

from typing import Any

import msgspec


class Task(msgspec.Struct, frozen=True):
    """One prompt with what the reward needs to judge it."""

    id: str
    prompt: str
    answer: str
    images: tuple[bytes, ...] = ()  # PNG bytes (rayrl.data.images.to_png), one per placeholder in the prompt
    # the same images once in Ray's object store (a ref to the tuple), images then empty: what the driver feeds,
    # so a group's samples, the reward and the learner share one stored copy (rayrl.image_refs)
    image_ref: Any = None


class GenerationRequest(msgspec.Struct):
    """n samples of one prompt; temperature 0 means greedy."""

    request_id: str
    prompt_ids: list[int]
    n: int
    max_new_tokens: int
    temperature: float
    ignore_eos: bool = False  # generate exactly max_new_tokens (benchmarks, interruption tests)
    timeout_s: float | None = None  # None: rollout.request_timeout_s; past it the request is aborted
    seed: int | None = None  # sample i draws from a stream seeded by (seed, i); None: the engine's own stream
    images: tuple[bytes, ...] = ()  # the task's PNG images, one per placeholder in prompt_ids (not yet expanded)


class Sample(msgspec.Struct):
    """One completion: tokens, behaviour log-probs and, per token, the policy version that made it."""

    request_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str  # "stop" (EOS), "length", "abort", or "markup" (drew image markup, ended before it)
    text: str = ""
    reward: float = 0.0
    reward_status: str = "pending"  # "ok", or why not: "error", "timeout", "non_finite", "wrong_type"
    reward_reason: str = ""
    rule_reward: float | None = None  # with a reward model: the rule's own reward (held-out accuracy counts it)
    model_score: float | None = None  # with a reward model: its score of this sample
    # multi-turn episodes: 1 where the policy sampled the completion token, 0 on tokens the environment
    # appended (tool results, chat markup); None: every completion token is the policy's
    loss_mask: list[int] | None = None
    turns: int = 1  # assistant turns in the episode
    teacher_logprobs: list[float] | None = None  # teacher.enabled: the teacher's log-prob of each completion token


class ScoreRequest(msgspec.Struct, frozen=True):
    """What a reward model sees of one sample: the task's prompt, the sample's answer, the task's reference."""

    prompt: str
    answer: str
    reference: str = ""


class TokenScoreRequest(msgspec.Struct, frozen=True):
    """What a teacher scores: the log-prob of each completion token after the prompt and the tokens before it."""

    prompt_ids: list[int]
    completion_ids: list[int]


class ModelScore(msgspec.Struct, frozen=True):
    """A reward model's score of one sample, or None with why: failure (unparsable, model_timeout, model_error,
    the sample's reward_status) and the message."""

    score: float | None
    reason: str = ""
    failure: str = ""


class TrajectoryGroup(msgspec.Struct):
    """The group_size samples of one task, scored together (GRPO's unit)."""

    task: Task
    samples: list[Sample]

    @property
    def min_version(self) -> int:
        return min((v for s in self.samples for v in s.versions), default=0)


class GroupMeta(msgspec.Struct, frozen=True):
    """What the buffer knows of a group without fetching it: where it is and how old it is."""

    task_id: str
    version: int  # oldest policy version among its tokens: the buffer checks it against the staleness bound
    worker: str = ""  # the rollout worker that generated it ("rollout-0", "rollout-0 restart 1")


class Batch(msgspec.Struct):
    """Padded training tensors built from trajectory groups (right-padded, one row per sample)."""

    input_ids: Any  # [B, T] long
    attention_mask: Any  # [B, T] long
    loss_mask: Any  # [B, T] float: 1 on completion tokens (targets), shifted to target positions
    behav_logprobs: Any  # [B, T] float, aligned with loss_mask
    versions: Any  # [B, T] long, aligned with loss_mask
    rewards: Any  # [B] float
    group_index: Any  # [B] long: which group each row belongs to
    truncated: Any = None  # [B] bool: cut at max_new_tokens (finish_reason "length")
    advantages: Any = None  # [B, T] float, filled by the algorithm
    prox_logprobs: Any = None
    ref_logprobs: Any = None
    teacher_logprobs: Any = None  # [B, T] float aligned with loss_mask, when every sample has the teacher's
    images: Any = None  # [B] each row's task images (a tuple of PNG bytes, shared by a group's rows), if any has
    # vision-language policies (rayrl.models.vision.attach_images): each row's image inputs and [3, B, T] positions
    image_inputs: Any = None
    rope_positions: Any = None


class TrainResult(msgspec.Struct):
    """One training step on the learner group: its stats merged over ranks and, for algorithm.type=ppo, the
    returns the critic learns next: one object ref per rank, each that rank's shard's returns per task id (a
    1-D tensor of per-token values per sample), for CriticGroup.train."""

    stats: dict
    returns: list | None = None


class WeightVersion(msgspec.Struct, frozen=True):
    """One finished weight sync: which version, how much, how long, how much of that went to pausing the
    rollout workers (their in-flight requests held) before any weight moved, and the first worker's own account
    of that hold (vLLM: its engine's pause, the wait for its outputs, the tokens still queued)."""

    version: int
    n_tensors: int
    n_bytes: int
    seconds: float
    pause_s: float = 0.0
    hold: dict[str, float] = msgspec.field(default_factory=dict)

"""An asynchronous RL loop written by hand over rayrl's actors, for programs that want their own loop: what
rayrl.trainer does, in a page. The rollout workers generate continuously; the buffer admits prompts while
they are within the staleness bound (rollout.max_staleness); each step trains on a batch and pushes the new
weights to the rollout workers, which carry on generating with them.

    python recipes/custom_loop.py --config recipes/arithmetic_grpo.yaml learner.total_steps=2 [--sync-every K]

--sync-every K pushes the weights after every K-th step only. A version is the learner's step count, so the
syncs publish K, 2K, ...; the K batches after a sync all come from its weights, which needs
rollout.max_staleness >= K - 1 (with less, the buffer's get_batch raises NoProgress saying so, never waits
forever). Prints one JSON line: per step the version the rollout workers hold, the versions of the batch's
samples and the loss, and after the last sync the largest gap between the rollout engine's log-probs of fresh
samples and the learner's (0 up to float rounding: the engine holds the learner's weights).
"""

from __future__ import annotations

import argparse
import json

import ray

from rayrl.cli import parse_args
from rayrl.config import Config
from rayrl.data import load_tasks
from rayrl.demo import prepare_models
from rayrl.driver import ActorSystem


def logprob_gap(system: ActorSystem, tasks, temperature: float) -> float:
    """Sample 4 completions per task on rollout worker 0, score them on the learner, return the worst gap."""
    groups = ray.get(system.rollouts[0].generate_groups.remote(tasks, 4, temperature))
    learner = system.learners.completion_logprobs(groups)
    engine = [s.logprobs for g in groups for s in g.samples]
    return max(abs(a - b) for la, lb in zip(learner, engine) for a, b in zip(la, lb))


def main(cfg: Config, sync_every: int = 1) -> dict:
    train_tasks, eval_tasks = load_tasks(cfg.data)
    B, steps = cfg.rollout.batch_size, cfg.learner.total_steps
    system = ActorSystem(cfg, "custom-loop", models=prepare_models(cfg))  # starts or joins Ray, creates every role
    try:
        ray.get(system.buffer.feed.remote(train_tasks[: 4 * B * (steps + cfg.rollout.max_staleness + 1)]))
        loops = [w.run.remote() for w in system.rollouts]  # generate until the buffer closes
        probe = eval_tasks[:8]
        fixed = ray.get(system.rollouts[0].generate_groups.remote(probe, 1, 0.0))  # scored again after training
        before = system.learners.completion_logprobs(fixed)
        record = {"steps": []}
        version = 0
        for step in range(1, steps + 1):
            batch = ray.get(system.buffer.get_batch.remote(B))  # B scored groups within the staleness bound
            result = system.learners.train([refs for refs, _meta in batch])  # one optimizer step
            if step % sync_every == 0 or step == steps:
                version = ray.get(system.broadcaster.sync.remote()).version  # rollouts and buffer: the learner's step
            record["steps"].append({"version": version, "sample_versions": sorted({m.version for _, m in batch}),
                                    "loss": result.stats["loss"], "staleness_mean": result.stats["staleness_mean"]})
        ray.get([w.stop.remote() for w in system.rollouts])
        ray.get(system.buffer.close.remote())
        ray.get(loops)
        after = system.learners.completion_logprobs(fixed)
        record["weights_moved"] = max(abs(a - b) for la, lb in zip(before, after) for a, b in zip(la, lb))
        record["logprob_gap_after_sync"] = logprob_gap(system, probe, cfg.rollout.temperature)
        return record
    finally:
        system.close()


if __name__ == "__main__":
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--sync-every", type=int, default=1)
    known, rest = own.parse_known_args()
    print(json.dumps(main(parse_args(rest, prog="custom_loop"), known.sync_every)))

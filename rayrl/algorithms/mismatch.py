"""How far the rollout engine's log-probs of the tokens it sampled are from the learner's, measured
on the tokens the learner's current weights produced (older tokens also differ by the policy change).

The field's gauges: mean |Δ log p|, NeMo-RL's token_mult_prob_error (mean of exp|Δ|), the k3
estimate of KL(learner || engine), and the worst token."""

from __future__ import annotations

import torch


class MismatchMeter:
    """Sums over micro-batches on the tensors' own device (no host sync per micro-batch); result() reads
    them once and gives the step's numbers (zero tokens: all 0)."""

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None  # float64 [tokens, |d|, exp|d|, k3, max |d|]

    def add(self, learner_logp: torch.Tensor, engine_logp: torch.Tensor, fresh: torch.Tensor) -> None:
        """fresh: bool mask of the tokens sampled by the weights the learner holds now."""
        engine_logp, fresh = engine_logp.to(learner_logp.device), fresh.to(learner_logp.device)
        delta = (learner_logp.detach() - engine_logp).double() * fresh
        w = fresh.double()
        a = delta.abs()
        part = torch.stack([w.sum(), a.sum(), (a.exp() * w).sum(),  # k3, r = engine/learner: E[r - 1 - log r]
                            (((-delta).exp() + delta - 1.0) * w).sum(), a.max() if a.numel() else a.new_zeros(())])
        if self.sums is None:
            self.sums = part
        else:
            self.sums = torch.cat([self.sums[:4] + part[:4], torch.maximum(self.sums[4:], part[4:])])

    def result(self) -> dict[str, float]:
        n, abs_sum, mult_sum, k3_sum, worst = self.sums.tolist() if self.sums is not None else (0, 0.0, 0.0, 0.0, 0.0)
        n = int(round(n))
        d = max(1, n)
        return {"mismatch_tokens": n, "mismatch_abs_mean": abs_sum / d,
                "token_mult_prob_error": mult_sum / d if n else 1.0, "mismatch_k3": k3_sum / d,
                "mismatch_max": worst}


def merge_mismatch(per_rank: list[dict]) -> dict[str, float]:
    """Token-weighted means across learner ranks, the largest maximum."""
    n = sum(r["mismatch_tokens"] for r in per_rank)
    out = {"mismatch_tokens": n, "mismatch_max": max(r["mismatch_max"] for r in per_rank)}
    for key in ("mismatch_abs_mean", "token_mult_prob_error", "mismatch_k3"):
        out[key] = sum(r[key] * r["mismatch_tokens"] for r in per_rank) / n if n else per_rank[0][key]
    return out


MISMATCH_KEYS = ("mismatch_tokens", "mismatch_abs_mean", "token_mult_prob_error", "mismatch_k3", "mismatch_max",
                 "correction_frac")


def summarize_mismatch(steps: list[dict]) -> dict[str, float]:
    """The run summary's view of the per-step gauges: token-weighted means over the steps, the worst
    token of any step, the mean share of tokens the correction touched, and the last step's mean."""
    with_tokens = [s for s in steps if s.get("mismatch_tokens")]
    n = sum(s["mismatch_tokens"] for s in with_tokens)
    out = {"mismatch_tokens": n, "mismatch_max": max((s["mismatch_max"] for s in with_tokens), default=0.0),
           "mismatch_abs_mean_last": with_tokens[-1]["mismatch_abs_mean"] if with_tokens else 0.0}
    for key in ("mismatch_abs_mean", "token_mult_prob_error", "mismatch_k3"):
        out[key] = sum(s[key] * s["mismatch_tokens"] for s in with_tokens) / n if n else 0.0
    fracs = [s["correction_frac"] for s in steps if "correction_frac" in s]
    out["correction_frac_mean"] = sum(fracs) / len(fracs) if fracs else 0.0
    return out

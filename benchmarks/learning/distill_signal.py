"""How fast can any per-token distillation signal move this student? The distillation recipe's student and cached
teacher (recipes/arithmetic_distill.py), no Ray and no system around them: each step samples 32 prompts x 8 at the
recipe's temperature from the student, scores them with the teacher, and takes one AdamW step on one of
  sampled   the recipe's loss: each sampled token's teacher - student log-prob as its advantage (the reverse KL's
            one-sample estimate, what rayrl's learner trains on)
  full_rkl  the exact reverse KL over the whole vocabulary at every completion position (no sampling noise in the
            per-token target: the lowest-variance dense signal there is; possible here, the vocabulary has 79 ids)
  full_fkl  the exact forward KL (the teacher's soft labels)
Held-out greedy accuracy (the recipes' 200 problems) every --eval-every steps. One JSON: every curve, and per loss
and learning rate the median accuracy at the last step.

    python -m benchmarks.learning.distill_signal [--seeds 0,1,2] [--steps 50] [--runs sampled:5e-5,full_rkl:2e-4]
"""

from __future__ import annotations

import importlib.util
import random
import statistics
from pathlib import Path

import torch

from benchmarks.common import benchmark_parser, print_table, spread, write_result
from rayrl.config import load_config
from rayrl.data.arithmetic import split
from rayrl.data.template import PromptTemplate
from rayrl.demo import prepare_models
from rayrl.models.policy import load_policy

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
RUNS = "sampled:5e-5,sampled:1e-4,full_rkl:5e-5,full_rkl:1e-4,full_rkl:2e-4,full_fkl:2e-4"
PROMPTS, GROUP = 32, 8


def _recipe():
    spec = importlib.util.spec_from_file_location("arithmetic_distill", RECIPES / "arithmetic_distill.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids, attn = torch.full((len(prompts), width), pad), torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], attn[i, width - len(p):] = torch.tensor(p), 1
    return ids, attn


class Study:
    def __init__(self, cfg, teacher_path: str) -> None:
        self.student_path = prepare_models(cfg).policy
        self.teacher, self.tokenizer = load_policy(teacher_path)
        self.teacher.eval()
        self.template = PromptTemplate(self.tokenizer)
        self.train_tasks, self.held_out = split(cfg.data)
        self.temperature, self.new_tokens = cfg.rollout.temperature, cfg.rollout.max_new_tokens
        self.eos, self.pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id

    def generate(self, model, prompts: list[list[int]], sample: bool) -> tuple[torch.Tensor, int]:
        ids, attn = left_padded(prompts, self.pad)
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=self.new_tokens, do_sample=sample,
                                 temperature=self.temperature if sample else None, top_k=0 if sample else None,
                                 top_p=1.0, pad_token_id=self.pad, eos_token_id=self.eos)
        model.train()
        return out, ids.shape[1]

    def accuracy(self, model) -> float:
        out, width = self.generate(model, [self.template.encode(t) for t in self.held_out], sample=False)
        right = 0
        for task, row in zip(self.held_out, out[:, width:].tolist()):
            right += self.eos in row and self.tokenizer.decode(row[:row.index(self.eos)]).strip() == task.answer
        return right / len(self.held_out)

    def run(self, loss_kind: str, lr: float, seed: int, steps: int, eval_every: int) -> dict:
        torch.manual_seed(seed)
        rng = random.Random(seed)
        student, _ = load_policy(self.student_path)
        opt = torch.optim.AdamW(student.parameters(), lr=lr, weight_decay=0.0)
        curve, kls = [(0, self.accuracy(student))], []
        for step in range(1, steps + 1):
            prompts = [self.template.encode(t) for t in rng.sample(self.train_tasks, PROMPTS) for _ in range(GROUP)]
            out, width = self.generate(student, prompts, sample=True)
            loss, kl = self.loss(student, out, width, loss_kind)
            opt.zero_grad()
            loss.backward()
            opt.step()
            kls.append(kl)
            if step % eval_every == 0 or step == steps:
                curve.append((step, self.accuracy(student)))
        return {"loss": loss_kind, "lr": lr, "seed": seed, "curve": curve, "final": curve[-1][1], "reverse_kl": kls}

    def loss(self, student, out: torch.Tensor, width: int, kind: str) -> tuple[torch.Tensor, float]:
        """(the step's loss, the sampled reverse KL) over completion tokens up to and including the first EOS."""
        completion = out[:, width:]
        eos = (completion == self.eos).long()
        mask = ((eos.cumsum(1) - eos) == 0).float()
        attn = torch.cat([(out[:, :width] != self.pad).long(), mask.long()], 1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        s = torch.log_softmax(student(input_ids=out, attention_mask=attn, position_ids=pos).logits[:, width - 1:-1]
                              .float() / self.temperature, -1)
        with torch.no_grad():
            t = torch.log_softmax(self.teacher(input_ids=out, attention_mask=attn, position_ids=pos)
                                  .logits[:, width - 1:-1].float() / self.temperature, -1)
        s_tok, t_tok = (x.gather(-1, completion.unsqueeze(-1)).squeeze(-1) for x in (s, t))
        per_token = {"sampled": lambda: -(t_tok - s_tok).detach() * s_tok,
                     "full_rkl": lambda: (s.exp() * (s - t)).sum(-1),
                     "full_fkl": lambda: (t.exp() * (t - s)).sum(-1)}[kind]()
        n = mask.sum()
        return (per_token * mask).sum() / n, float(((s_tok - t_tok).detach() * mask).sum() / n)


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--runs", default=RUNS, help="comma-separated loss:lr")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    teacher = _recipe().build_teacher(["metrics.progress=false"])
    cfg = load_config(RECIPES / "arithmetic_distill.yaml", ["metrics.progress=false", f"teacher.path={teacher}"])
    study = Study(cfg, teacher)
    plan = [(kind, float(lr)) for kind, lr in (r.split(":") for r in args.runs.split(","))]
    runs = []
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        for kind, lr in (plan if i % 2 == 0 else plan[::-1]):
            runs.append(study.run(kind, lr, seed, args.steps, args.eval_every))
            print(kind, lr, seed, runs[-1]["curve"], flush=True)
    rows = [{"loss": kind, "lr": f"{lr:g}", **{f"step {s}": statistics.median(dict(r["curve"])[s] for r in runs
                                                                        if (r["loss"], r["lr"]) == (kind, lr))
                                         for s, _ in runs[0]["curve"]}} for kind, lr in plan]
    finals = {f"{kind}:{lr:g}": spread([r["final"] for r in runs if (r["loss"], r["lr"]) == (kind, lr)])
              for kind, lr in plan}
    path = write_result("distill_signal", {"teacher": teacher, "finals": finals, "rows": rows, "args": vars(args),
                                           "runs": runs}, args.commit)
    print_table(rows, list(rows[0]))
    print("held-out greedy accuracy, median over seeds ->", path)


if __name__ == "__main__":
    main()

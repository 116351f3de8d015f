"""Every multi-GPU measurement in one command: it counts the GPUs it has, runs the parts that fit them (each a
benchmark of its own, in its own process, writing its own result JSON) and prints a table last.

    python -m benchmarks.multi_gpu --commit SHA                 # every part this machine can run, in order
    python -m benchmarks.multi_gpu --commit SHA --parts split-0.5b,nccl-sync   # some (one device call's worth)
    python -m benchmarks.multi_gpu --list [--gpus 8]            # the plan, without running it

Parts (the GPUs each needs):
  split-0.5b, split-0.5b-reverse, split-1.5b, split-1.5b-reverse (2): rollout and learner on their own GPUs,
      async (η = 2, 4) against the strong η = 0 (CUDA graphs, compiled learner); a part and its -reverse run the
      η values in opposite orders, merged as repeats by async_vs_sync --merge
  nccl-sync (2): the 1.5B shape's weight sync from the learner's GPU into vLLM on another, against a raw NCCL
      broadcast of the same bytes
  learner-ranks (2; 4 ranks with 4): FSDP2 and ZeRO-3 on 1, 2 (and 4) ranks, MFU per rank against one rank
  elastic (3): rollout workers join and leave while the NCCL sync group re-forms, nothing lost
  failover-cost (3): the learner's in-memory copies off, on, and on with rank 1 killed, on 2 learner GPUs beside
      vLLM on the 1.5B shape: what the copy costs a step and how fast a lost rank mends over NCCL
  scale-1x1, scale-4x4 (2, 8): 300 steps of 1 vLLM + 1 learner GPU and of 4 + 4 (4x the batch), samples/s and
      NCCL timeouts counted
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import RESULTS, format_table, write_result

PY = [sys.executable, "-m"]
SPLIT = ["benchmarks.performance.async_vs_sync", "--gpus", "2", "--etas", "0,2,4", "--repeats", "1",
         "--steps", "24", "--warmup", "12"]
SCALE = ["benchmarks.performance.async_vs_sync", "--etas", "0", "--repeats", "1", "--steps", "300", "--warmup", "20"]


@dataclass(frozen=True)
class Part:
    name: str
    gpus: int  # the fewest it runs on
    argv: tuple[str, ...]  # after `python -m`; --commit is added
    limit_s: int  # one device call at most


def parts(gpus: int) -> list[Part]:
    """The parts a machine with `gpus` GPUs runs, in order."""
    ranks = "1,2,4" if gpus >= 4 else "1,2"
    plan = [Part(f"split-{shape}{rev}", 2, (*SPLIT, "--shape", shape, *(["--reverse-first"] if rev else [])), 590)
            for shape in ("0.5b", "1.5b") for rev in ("", "-reverse")]
    plan += [Part("nccl-sync", 2, ("benchmarks.performance.nccl_sync",), 480),
             Part("learner-ranks", 2, ("benchmarks.performance.learner_mfu", "--ranks", ranks, "--runs",
                                       "fsdp:packed:16384:compile,zero3:packed:16384"), 590),
             Part("elastic", 3, ("benchmarks.performance.elastic_gpu",), 590),
             Part("failover-cost", 3, ("benchmarks.performance.failover_cost", "--gpus", "3", "--shape", "1.5b",
                                       "--repeats", "1", "--steps", "24", "--warmup", "8"), 590),
             Part("scale-1x1", 8, (*SCALE, "--gpus", "2"), 590),
             Part("scale-4x4", 8, (*SCALE, "--gpus", "8", "--learner-gpus", "4"), 590)]
    return [p for p in plan if p.gpus <= gpus]


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def run_part(part: Part, commit: str | None) -> dict:
    """Runs one part in its own process; its result JSONs are the files it wrote under benchmarks/results."""
    start = time.time()
    argv = [*PY, *part.argv, *(["--commit", commit] if commit else [])]
    try:
        rc = subprocess.run(argv, timeout=part.limit_s).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    written = sorted(str(f.relative_to(RESULTS.parent)) for f in RESULTS.glob("*.json") if f.stat().st_mtime >= start)
    return {"part": part.name, "rc": rc, "seconds": round(time.time() - start), "results": written,
            "headline": headline(written)}


def headline(files: list[str]) -> str:
    """Each result's figure that its acceptance bar reads."""
    out = []
    for f in files:
        data = json.loads((RESULTS.parent / f).read_text())
        if "rows" in data and data["rows"] and "speedup" in data["rows"][-1]:
            best = max(data["rows"], key=lambda r: (r["speedup"] or {}).get("median", 0))
            out.append(f"eta={best['eta']} {best['samples_per_s']['median']:.0f} samples/s")
        elif "summary" in data and "hot_publish_s_median" in data["summary"]:
            out.append(f"hot sync {data['summary']['hot_publish_s_median'] * 1e3:.1f} ms, "
                       f"{data['summary']['hot_over_raw_flat']:.2f}x raw")
        elif "rows" in data and data["rows"] and "mfu_over_one_rank" in data["rows"][0]:
            out.append(", ".join(f"{r['backend']} {r['mfu_over_one_rank']:.2f}" for r in data["rows"]
                                 if r["ranks"] > 1 and r["mfu_over_one_rank"] is not None))
        elif "copy_cost" in data:
            out.append(f"copies {data['copy_cost']['median']:.3f}x the step without, "
                       f"recovery {data['recovery_s']['median'] if data['recovery_s'] else float('nan'):.1f} s")
        elif "summary" in data and "ledger_balanced" in data["summary"]:
            s = data["summary"]
            out.append(f"joins {s['joins']}, leaves {s['leaves']}, ledger balanced {s['ledger_balanced']}, "
                       f"{s['distinct_ids']}/{s['trained_ids']} ids distinct")
    return "; ".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", default=None, help="commit of the code that runs")
    p.add_argument("--parts", default=None, help="comma-separated part names (default: all that fit)")
    p.add_argument("--list", action="store_true", help="print the plan and stop")
    p.add_argument("--gpus", type=int, default=None, help="with --list: plan for this many GPUs")
    p.add_argument("--kind", default=None, help="the machine's name where it was lent by one (kept in the JSON)")
    args = p.parse_args()
    gpus = args.gpus if args.gpus is not None and args.list else gpu_count()
    plan = parts(gpus)
    if args.parts:
        wanted = args.parts.split(",")
        unknown = [w for w in wanted if w not in {q.name for q in parts(8)}]
        too_big = [w for w in wanted if w not in {q.name for q in plan} and w not in unknown]
        if unknown or too_big:
            p.error(f"--parts: unknown {unknown}; needing more than this machine's {gpus} GPUs {too_big}")
        plan = [q for q in plan if q.name in wanted]
    if args.list or not plan:
        print(format_table([{"part": q.name, "gpus": q.gpus, "limit_s": q.limit_s, "command": " ".join(q.argv)}
                            for q in plan], ["part", "gpus", "limit_s", "command"]))
        if not plan:
            raise SystemExit(f"this machine has {gpus} GPUs: every part needs 2 or more")
        return
    rows = [run_part(q, args.commit) for q in plan]
    print(format_table(rows, ["part", "rc", "seconds", "headline", "results"]))
    path = write_result("multi_gpu", {"kind": args.kind, "gpus": gpus, "rows": rows,
                                      "plan": [q.name for q in parts(gpus)]}, args.commit)
    print("->", path)


if __name__ == "__main__":
    main()

"""The agent layer on vLLM (one GPU): the calculator agent's held-out greedy success through the
gateway with a vLLM rollout worker, beside the hf engine on CPU (same model, fp32), and one two-turn
session whose recorded tokens vLLM reproduces exactly. No learner: rollout, reward, gateway only.

    python tests/gpu/agent_check.py [--gpu 1]      (run on the GPU machine; --gpu 0 checks the script on CPU)
"""

from __future__ import annotations

import asyncio
import json

import openai
import ray

from rayrl.testing.records import benchmark_parser, format_table, write_result
from rayrl.actors import Gateway, RewardActor, RolloutWorker, TrajectoryBuffer
from rayrl.config import load_config
from rayrl.data import PromptTemplate, load_tasks
from rayrl.demo import prepare_models
from rayrl.models.tokenizer import load_tokenizer
from rayrl.types import GenerationRequest
from rayrl.workflows.base import Sampling
from rayrl.workflows.tools import calculator, evaluate_arithmetic


async def two_turns(gateway, url: str, worker, prompt: str) -> dict:
    """One session with the openai client; then vLLM regenerates each turn from the recorded tokens."""
    sid = await gateway.open_session.remote("check", 0, 0, Sampling(1, 0.0, 72, 0), 320)
    client = openai.AsyncOpenAI(base_url=f"{url}/sessions/{sid}/v1", api_key="x", max_retries=0)
    messages = [{"role": "user", "content": prompt}]
    first = (await client.chat.completions.create(model="rayrl", messages=messages, tools=[calculator.schema()])).choices[0]
    call = first.message.tool_calls[0]
    messages += [first.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id,
                 "content": evaluate_arithmetic(json.loads(call.function.arguments)["expression"])}]
    await client.chat.completions.create(model="rayrl", messages=messages, tools=[calculator.schema()])
    end = await gateway.close_session.remote(sid)
    s, mask = end.sample, end.sample.loss_mask
    cut = mask.index(0)
    back = cut + mask[cut:].index(1)
    redo1, redo2 = await worker.generate.remote([GenerationRequest("a", s.prompt_ids, 1, 72, 0.0),
                                                 GenerationRequest("b", s.prompt_ids + s.completion_ids[:back], 1, 72, 0.0)])
    return {"turns": s.turns, "retokenized": end.retokenized,
            "turn1_equal": redo1.completion_ids == s.completion_ids[:cut],
            "turn2_equal": redo2.completion_ids == s.completion_ids[back:]}


def main() -> None:
    p = benchmark_parser(__doc__)
    p.add_argument("--gpu", type=int, default=1)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    gpu = ["cluster.n_gpus_per_node=1", "vllm.gpu_memory_utilization=0.3"] if args.gpu else ["vllm.cpu_kv_cache_gb=0.25"]
    cfg = load_config("recipes/calculator_agent.yaml", [*gpu, "rollout.engine=vllm", "vllm.enforce_eager=true",
                                                        "vllm.dtype=float32", *args.overrides])
    ray.init(address="local", include_dashboard=False)
    model = prepare_models(cfg).policy
    template = ray.put(PromptTemplate(load_tokenizer(model)))
    _, held_out = load_tasks(cfg.data)
    buffer = TrajectoryBuffer.remote(8, 1)
    rewards = [RewardActor.options(max_concurrency=4).remote(cfg)]
    gateway = Gateway.remote(cfg, template, [])
    url = ray.get(gateway.start.remote())
    hf_cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"engine": "hf"})})
    vllm = RolloutWorker.options(num_gpus=args.gpu).remote(0, cfg, model, buffer, rewards, 4, gateway, url)
    hf = RolloutWorker.options(num_gpus=0).remote(1, hf_cfg, model, buffer, rewards, 4, gateway, url)
    rows = []
    for name, worker, index in (("vllm", vllm, 0), ("hf", hf, 1)):
        ray.get(gateway.set_workers.remote([vllm, hf]))
        groups = ray.get(worker.evaluate.remote(held_out, 1, 0.0))
        rows.append({"engine": name, "held_out": len(held_out),
                     "success": sum(g.samples[0].reward >= 1 for g in groups) / len(held_out)})
    session = asyncio.run(two_turns(gateway, url, vllm, held_out[0].prompt))
    rows[0].update(session)
    stats = ray.get(gateway.stats.remote())
    print(format_table(rows, ["engine", "held_out", "success", "turns", "retokenized", "turn1_equal", "turn2_equal"]))
    path = write_result("gpu_agent_check", {"rows": rows, "gateway": stats, "gpu": args.gpu}, args.commit)
    print("->", path)
    ray.shutdown()


if __name__ == "__main__":
    main()

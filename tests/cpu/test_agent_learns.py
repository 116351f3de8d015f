"""The calculator agent (recipes/calculator_agent.py, an OpenAI-SDK agent behind the gateway) learns
on CPU: held-out greedy success before and after training, in the same run. Its warm-up misreads
"gives away" as + most of the time, which RL has to unlearn."""

from __future__ import annotations

from rayrl.trainer import train

GAIN = 0.15  # held-out success, after minus before


def test_calculator_agent_learns(ray_cluster, agent_cfg):
    summary = train(agent_cfg("metrics.run_name=agent-learns", "data.eval_size=100"))
    before, after = summary["eval_accuracy_before"], summary["eval_accuracy_after"]
    assert after >= before + GAIN, f"held-out success {before:.3f} -> {after:.3f}, want +{GAIN}"
    gateway = summary["gateway"]
    assert gateway["sessions_open"] == 0 and gateway["sessions_abandoned"] == 0 and gateway["retokenized"] == 0
    assert gateway["turns"] > gateway["sessions_closed"]  # multi-turn: a tool call, then the answer
    assert not summary["workflow"].get("agent_errors") and not summary["workflow"].get("agent_timeouts")

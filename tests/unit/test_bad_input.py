"""Bad input a user can give, each refused before Ray starts in one line naming the key or the file and line, exit
code 2, no traceback; and the data loader under random files (hypothesis): tasks, or a ConfigError naming the file,
never another exception."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayrl.cli import main
from rayrl.config import ConfigError, load_config
from rayrl.preflight import check_data

ROW = {"question": "Ann has 3 pens and gets 2 more. How many?", "answer": "3 + 2 = 5\n#### 5"}


@pytest.fixture
def fake_model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def _gsm8k(tmp_path, text: str) -> list[str]:
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(text)
    return ["data.task=gsm8k", f"data.path={path}", "data.eval_size=1"]


CASES = {
    "no operations": (lambda tmp, model: ["data.ops=[]"], "data.ops"),
    "held out everything": (lambda tmp, model: ["data.eval_size=2500"], "data.eval_size=2500 leaves no training"),
    "empty file": (lambda tmp, model: [*_gsm8k(tmp, ""), f"model.path={model}"], "no problems in it"),
    "not JSON": (lambda tmp, model: [*_gsm8k(tmp, json.dumps(ROW) + "\n{oops\n"), f"model.path={model}"],
                 r"gsm8k.jsonl:2: not a JSON object"),
    "missing field": (lambda tmp, model: [*_gsm8k(tmp, json.dumps({"question": "q"}) + "\n"), f"model.path={model}"],
                      r"gsm8k.jsonl:1: expected string keys 'question' and 'answer'"),
    "no final answer": (lambda tmp, model: [*_gsm8k(tmp, json.dumps({"question": "q", "answer": "5"}) + "\n"),
                                            f"model.path={model}"], r"gsm8k.jsonl:1: the answer has no '#### <number>'"),
    "gsm8k without a model": (lambda tmp, model: _gsm8k(tmp, json.dumps(ROW) + "\n"), "data.task=gsm8k needs model.path"),
    "model cache is a file": (lambda tmp, model: [f"demo.cache_dir={model / 'config.json'}/models"],
                              "demo.cache_dir .* is a file, not a directory"),
    "micro-batch below one sequence": (lambda tmp, model: ["learner.max_tokens_per_micro_batch=4"],
                                       "learner.max_tokens_per_micro_batch=4 is below one sequence"),
    "a section given a value": (lambda tmp, model: ["algorithm=ppo"], "'algorithm' is a section of keys"),
    "LoRA on layers the model lacks": (lambda tmp, model: ["lora.enabled=true", "lora.target_modules=[c_attn]"],
                                       r"lora.target_modules \['c_attn'\] name no linear layer of Qwen2ForCausalLM"),
    "LoRA on DeepSpeed": (lambda tmp, model: ["lora.enabled=true", "learner.backend=deepspeed"],
                          "lora.enabled=true does not work with learner.backend=deepspeed"),
    "LoRA above vLLM's ranks": (lambda tmp, model: ["lora.enabled=true", "rollout.engine=vllm", "lora.rank=1024"],
                                "above vLLM's largest max_lora_rank"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_before_ray_starts(case, tmp_path, fake_model, capsys):
    overrides, match = CASES[case]
    with pytest.raises(SystemExit) as stop:
        main(["train", *overrides(tmp_path, fake_model), f"metrics.run_dir={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert re.search(match, lines[0]), lines[0]
    assert not (tmp_path / "runs").exists()  # refused before the run began (Ray, the model, the run directory)


lines = st.one_of(st.just(json.dumps(ROW)), st.just(""), st.text(max_size=30),
                  st.dictionaries(st.sampled_from(["question", "answer", "other"]),
                                  st.one_of(st.text(max_size=10), st.integers(), st.just("x\n#### 3")),
                                  max_size=3).map(json.dumps),
                  st.lists(st.integers(), max_size=3).map(json.dumps))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(lines, max_size=6))
def test_random_data_files_give_tasks_or_a_config_error_naming_the_file(tmp_path, fake_model, rows):
    path = tmp_path / "random.jsonl"
    path.write_text("\n".join(rows))
    cfg = load_config(None, ["data.task=gsm8k", f"data.path={path}", "data.eval_size=1", f"model.path={fake_model}"])
    try:
        train, held_out = check_data(cfg)
    except ConfigError as err:
        assert str(path) in str(err) or "data.eval_size" in str(err), err
        return
    valid = [r for r in rows if r.strip()]
    assert len(train) + len(held_out) == len(valid) >= 2


# configurations that once passed the config and failed only when the placement group or the transport was built
AT_PLACEMENT = {
    "colocated workers unpaired": (["placement.mode=colocate", "rollout.max_staleness=0", "rollout.num_workers=2"],
                                   "needs rollout.num_workers == learner.num_workers"),
    "colocated vLLM over two GPUs": (["placement.mode=share", "cluster.n_gpus_per_node=2", "rollout.engine=vllm",
                                      "vllm.tensor_parallel_size=2", "sync.transport=ipc",
                                      "learner.gpu_memory_fraction=0.15"], "set vllm.tensor_parallel_size=1"),
    "nccl on a shared GPU": (["placement.mode=share", "cluster.n_gpus_per_node=1", "rollout.engine=vllm",
                              "learner.gpu_memory_fraction=0.1", "sync.transport=nccl"], "NCCL cannot form a group"),
}


@pytest.mark.parametrize("case", AT_PLACEMENT)
def test_check_config_refuses_what_would_fail_at_placement(case, capsys):
    """`rayrl check-config` refuses each one with one line naming the key, before Ray starts."""
    overrides, match = AT_PLACEMENT[case]
    with pytest.raises(SystemExit) as stop:
        main(["check-config", *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and re.search(match, err[0]), err

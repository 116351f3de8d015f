import subprocess
import sys
from pathlib import Path

import pytest

from rayrl.config import SECTIONS, ConfigError, load_config, parse_overrides

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "arithmetic_grpo.yaml"


def test_recipe_yaml_and_overrides():
    cfg = load_config(RECIPE, ["rollout.max_staleness=0", "rollout.batch_size=32", "algorithm.beta=0.1"])
    assert (cfg.rollout.max_staleness, cfg.rollout.batch_size, cfg.algorithm.beta) == (0, 32, 0.1)
    assert cfg.reward.fn == "rayrl.rewards.arithmetic:exact_match"


def test_unknown_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match=r"rollout\.batch_szie.*did you mean 'rollout\.batch_size'"):
        load_config(None, ["rollout.batch_szie=3"])


def test_unknown_section_is_named():
    with pytest.raises(ConfigError, match="unknown config key 'rollotu'"):
        load_config(None, ["rollotu.batch_size=3"])


@pytest.mark.parametrize("override, key", [
    ("rollout.batch_size=abc", "rollout.batch_size"),
    ("rollout.batch_size=0", "rollout.batch_size"),
    ("algorithm.type=ppo_critic", "algorithm.type"),
    ("scheduler.type=slurm", "scheduler.type"),
    ("rollout.max_staleness=-1", "rollout.max_staleness"),
    ("placement.sleep_level=true", "placement.sleep_level"),  # a bool is no choice of numbers, though True == 1
    ("learner.zero_stage=false", "learner.zero_stage"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=f"bad value for '{key}'"):
        load_config(None, [override])


def test_malformed_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not of the form"):
        parse_overrides(["rollout.batch_size"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(tmp_path / "list.yaml")


def test_plain_torch_learner_is_single_rank():
    with pytest.raises(ConfigError, match="learner.backend=fsdp"):
        load_config(None, ["learner.num_workers=2"])
    assert load_config(None, ["learner.num_workers=2", "learner.backend=fsdp"]).learner.num_workers == 2


def test_data_range_checked():
    with pytest.raises(ConfigError, match="max_operand"):
        load_config(None, ["data.min_operand=10", "data.max_operand=5"])


def test_a_data_path_the_task_would_not_read_is_refused():
    with pytest.raises(ConfigError, match="data.path=/x.jsonl is read only by data.task=gsm8k"):
        load_config(None, ["data.path=/x.jsonl"])
    assert load_config(None, ["data.task=gsm8k", "data.path=/x.jsonl"]).data.path == "/x.jsonl"


def test_recipe_exits_nonzero_on_typo():
    proc = subprocess.run([sys.executable, str(ROOT / "recipes" / "arithmetic_grpo.py"), "--config", str(RECIPE),
                           "rollout.batch_szie=3"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "rollout.batch_szie" in proc.stderr and "rollout.batch_size" in proc.stderr


def test_gpu_only_options_are_rejected_on_cpu():
    from rayrl.preflight import check_transport

    with pytest.raises(ConfigError, match="sync.transport=nccl needs GPUs"):  # a transport's own requirement
        check_transport(load_config(None, ["sync.transport=nccl", "rollout.engine=vllm"]))
    with pytest.raises(ConfigError, match="tensor_parallel_size > 1 needs rollout.engine=vllm"):
        load_config(None, ["vllm.tensor_parallel_size=2", "cluster.n_gpus_per_node=2"])


def test_openai_agent_needs_its_function():
    with pytest.raises(ConfigError, match="OpenAIAgent runs agent.fn; set agent.fn="):
        load_config(None, ["rollout.workflow=rayrl.workflows.openai_agent:OpenAIAgent"])
    cfg = load_config("recipes/calculator_agent.yaml")
    assert cfg.agent.wants_gateway(cfg.rollout.workflow) and not cfg.agent.wants_gateway("rayrl.workflows.rlvr:SingleTurn")


@pytest.mark.parametrize("old, new", [
    ("model.backend=vllm", "rollout.engine"), ("rollout.enforce_eager=true", "vllm.enforce_eager"),
    ("model.build.hidden_size=64", "demo.hidden_size"), ("metrics.eval_every_steps=5", "eval.every_steps"),
    ("rollout.max_concurrent_calls=2", "hf.max_concurrent_calls"), ("algorithm.eps=1e-6", "algorithm.advantage_std_eps"),
])
def test_a_moved_key_names_its_new_place(old, new):
    with pytest.raises(ConfigError, match=f"'{old.split('=')[0]}' moved to '{new}'"):
        load_config(None, [old])


def test_a_moved_key_in_a_yaml_file_names_its_new_place(tmp_path):
    (tmp_path / "old.yaml").write_text("model:\n  backend: hf\n  build:\n    num_layers: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "old.yaml")
    assert "'model.backend' moved to 'rollout.engine'" in str(err.value)
    assert "'model.build.num_layers' moved to 'demo.num_layers'" in str(err.value)


def test_a_section_given_a_value_is_named():
    with pytest.raises(ConfigError, match=r"'algorithm' is a section of keys .*got 'ppo'"):
        load_config(None, ["algorithm=ppo"])


_COLOCATED_LORA = ["lora.enabled=true", "rollout.engine=vllm", "placement.mode=colocate", "rollout.max_staleness=0",
                   "cluster.n_gpus_per_node=1", "sync.transport=ipc"]
# each rule across sections: overrides that break it, and the same with the fix that makes it hold
_TEACHER = ["teacher.enabled=true", "teacher.path=/models/teacher"]
RULE_CASES = {
    "colocated_workers_pair_up": (["placement.mode=colocate", "rollout.max_staleness=0", "rollout.num_workers=2"],
                                  ["placement.mode=colocate", "rollout.max_staleness=0", "rollout.num_workers=2",
                                   "learner.num_workers=2", "learner.backend=fsdp"]),
    "colocated_vllm_is_one_device": (["placement.mode=share", "cluster.n_gpus_per_node=2", "rollout.engine=vllm",
                                      "vllm.tensor_parallel_size=2", "sync.transport=ipc",
                                      "learner.gpu_memory_fraction=0.15"],
                                     ["placement.mode=split", "cluster.n_gpus_per_node=2", "rollout.engine=vllm",
                                      "vllm.tensor_parallel_size=2", "sync.transport=ipc",
                                      "learner.gpu_memory_fraction=0.15"]),
    "group_relative_needs_groups": (["rollout.group_size=1", "algorithm.dynamic_sampling=false"],
                                    ["rollout.group_size=1", "algorithm.dynamic_sampling=false",
                                     "algorithm.type=reinforce_pp"]),
    "dynamic_sampling_needs_groups": (["rollout.group_size=1", "algorithm.type=reinforce_pp"],
                                      ["rollout.group_size=1", "algorithm.type=reinforce_pp",
                                       "algorithm.dynamic_sampling=false"]),
    "overlong_buffer_fits": (["algorithm.overlong_buffer=6"], ["algorithm.overlong_buffer=5"]),
    "openai_agent_needs_fn": (["rollout.workflow=rayrl.workflows.openai_agent:OpenAIAgent"],
                              ["rollout.workflow=rayrl.workflows.openai_agent:OpenAIAgent", "agent.fn=a.b:c"]),
    "colocate_is_synchronous": (["placement.mode=colocate"], ["placement.mode=colocate", "rollout.max_staleness=0"]),
    "share_memory_fits": (["placement.mode=share", "cluster.n_gpus_per_node=1"],
                          ["placement.mode=share", "cluster.n_gpus_per_node=1", "learner.gpu_memory_fraction=0.15"]),
    "rollouts_per_gpu_is_share": (["placement.rollouts_per_gpu=2", "rollout.num_workers=2"],
                                  ["placement.rollouts_per_gpu=2", "rollout.num_workers=2", "placement.mode=share"]),
    "offload_optimizer_needs_colocate": (["learner.offload_optimizer=true", "placement.mode=share"],
                                         ["learner.offload_optimizer=true", "placement.mode=colocate",
                                          "rollout.max_staleness=0"]),
    "offload_optimizer_is_not_deepspeed": (["learner.offload_optimizer=true", "learner.backend=deepspeed",
                                            "placement.mode=colocate", "rollout.max_staleness=0"],
                                           ["learner.cpu_offload=true", "learner.backend=deepspeed"]),
    "tensor_parallel_needs_vllm_gpus": (["vllm.tensor_parallel_size=2"],
                                        ["vllm.tensor_parallel_size=2", "rollout.engine=vllm",
                                         "cluster.n_gpus_per_node=2", "sync.transport=nccl"]),
    "bitwise_is_verified_setup": (["rollout.bitwise_on_policy=true"],
                                  ["rollout.bitwise_on_policy=true", "rollout.engine=vllm", "cluster.n_gpus_per_node=2",
                                   "sync.transport=nccl", "vllm.enforce_eager=true", "vllm.dtype=bfloat16",
                                   "learner.dtype=bfloat16", "learner.backend=fsdp"]),
    "lora_rank_fits_vllm": (["lora.enabled=true", "rollout.engine=vllm", "lora.rank=1024"],
                            ["lora.enabled=true", "rollout.engine=vllm", "lora.rank=512"]),
    "lora_has_a_path": (["lora.enabled=true", "learner.backend=deepspeed"], ["lora.enabled=true", "learner.backend=fsdp"]),
    "lora_keeps_the_base_asleep": (_COLOCATED_LORA, [*_COLOCATED_LORA, "placement.sleep_level=1"]),
    "elastic_fleet_fits": (["rollout.fleet=elastic"], ["rollout.fleet=elastic", "rollout.max_workers=2"]),
    "lora_on_gpu_vllm_is_half": ([*_COLOCATED_LORA, "placement.sleep_level=1", "vllm.dtype=float32"],
                                 [*_COLOCATED_LORA, "placement.sleep_level=1", "vllm.dtype=bfloat16"]),
    "reward_model_template_shows_the_answer": (["reward.model.kind=judge", "reward.model.template='{prompt}?'"],
                                               ["reward.model.kind=judge", "reward.model.template='{answer}?'"]),
    "judge_votes_need_sampling": (["reward.model.kind=judge", "reward.model.votes=3"],
                                  ["reward.model.kind=judge", "reward.model.votes=3", "reward.model.temperature=1.0"]),
    "served_models_gpus_fit": (["reward.model.kind=judge", "cluster.n_gpus_per_node=2", "rollout.engine=vllm",
                               "sync.transport=nccl"],
                              ["reward.model.kind=judge", "cluster.n_gpus_per_node=2", "rollout.engine=vllm",
                               "sync.transport=nccl", "reward.model.placement=rollout", "reward.model.gpu_fraction=0.2"]),
    "reward_model_fits_beside_rollout": (["reward.model.kind=judge", "reward.model.placement=rollout",
                                          "reward.model.num_actors=2"],
                                         ["reward.model.kind=judge", "reward.model.placement=rollout",
                                          "reward.model.num_actors=2", "rollout.num_workers=2"]),
    "teacher_has_a_path": (["teacher.enabled=true"], ["teacher.enabled=true", "teacher.path=/models/teacher"]),
    "teacher_path_needs_enabled": (["teacher.path=/models/teacher"], _TEACHER),
    "reward_model_path_needs_kind": (["reward.model.path=/models/judge"],
                                     ["reward.model.path=/models/judge", "reward.model.kind=judge"]),
    "distillation_keeps_equal_reward_groups": ([*_TEACHER, "algorithm.reward_coef=0"],
                                               [*_TEACHER, "algorithm.reward_coef=0", "algorithm.dynamic_sampling=false"]),
    "teacher_fits_beside_rollout": ([*_TEACHER, "teacher.placement=rollout", "teacher.num_actors=2"],
                                    [*_TEACHER, "teacher.placement=rollout", "teacher.num_actors=2",
                                     "rollout.num_workers=2"]),
    "minibatches_fit_the_batch": (["rollout.batch_size=8", "learner.minibatches=5", "learner.backend=fsdp",
                                   "learner.num_workers=2"],
                                  ["rollout.batch_size=10", "learner.minibatches=5", "learner.backend=fsdp",
                                   "learner.num_workers=2"]),
}


def _unchecked(overrides: list[str]):
    """A Config whose sections are validated but whose rules across sections are not."""
    from rayrl.config import SECTIONS, Config

    tree = parse_overrides(overrides)
    return Config.model_construct(**{name: cls.model_validate(tree.get(name, {})) for name, cls in SECTIONS.items()})


# each transport's own requirements (rayrl.engines.transport), checked by the rule transport_fits
_SHARE = ["placement.mode=share", "cluster.n_gpus_per_node=1", "rollout.engine=vllm", "learner.gpu_memory_fraction=0.1"]
TRANSPORT_CASES = {
    "ipc needs a shared GPU": (["sync.transport=ipc"], ["sync.transport=ipc", *_SHARE]),
    "nccl cannot share a GPU": ([*_SHARE, "sync.transport=nccl"], [*_SHARE, "sync.transport=ipc"]),
    "ipc needs one rollout worker": (["sync.transport=ipc", "rollout.num_workers=2"], ["rollout.num_workers=2"]),
    "nccl reaches no LoRA receiver": (["lora.enabled=true", "rollout.engine=vllm", "cluster.n_gpus_per_node=2",
                                       "sync.transport=nccl", "vllm.dtype=bfloat16"],
                                      ["lora.enabled=true", "rollout.engine=vllm", "cluster.n_gpus_per_node=2",
                                       "sync.transport=gloo", "vllm.dtype=bfloat16"]),
    "an unknown transport": (["sync.transport=rayrl.engines.transport.gloo:NOPE"], ["sync.transport=gloo"]),
}


@pytest.mark.parametrize("case", TRANSPORT_CASES)
def test_each_transport_requirement(case):
    """A configuration a transport cannot serve is refused by the preflight (`rayrl check-config`, `rayrl train`)
    before Ray starts, naming what to set; the fix holds."""
    from rayrl.preflight import check_transport, transport_fits

    bad, good = TRANSPORT_CASES[case]
    why = transport_fits(load_config(None, bad))
    assert why is not None and "sync.transport" in why
    with pytest.raises(ConfigError) as err:
        check_transport(load_config(None, bad))
    assert why in str(err.value)
    check_transport(load_config(None, good))


@pytest.mark.parametrize("rule", __import__("rayrl.config.rules", fromlist=["RULES"]).RULES, ids=lambda r: r.__name__)
def test_each_rule_across_sections(rule):
    """Every rule has a case here; it names what to set, and the fix makes it (and every rule) hold."""
    bad, good = RULE_CASES[rule.__name__]
    why = rule(_unchecked(bad))
    assert why is not None and any(f"{section}." in why for section in SECTIONS)
    with pytest.raises(ConfigError) as err:
        load_config(None, bad)
    assert why in str(err.value)
    assert rule(_unchecked(good)) is None
    load_config(None, good)


def test_a_written_config_reads_back_as_the_same_config(tmp_path):
    from rayrl.config import write_config_file

    cfg = load_config(None, ["learner.adam_betas=[0.8,0.9]", "learner.adam_fused=true", "algorithm.type=DR-GRPO",
                             "checkpoint.every_steps=0", "rollout.max_new_tokens=7"])
    write_config_file(cfg.model_dump(mode="json"), tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg

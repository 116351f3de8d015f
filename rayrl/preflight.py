"""What can be checked before Ray starts is checked before Ray starts: the reward function imports and takes
(sample, task), the workflow class and agent function import, the files and directories the config names, the
task's data (the file parses, has its fields and answers, leaves problems to train on), one sequence fits a
micro-batch, tasks with images meet a vision-language policy, a placeholder per image and pictures that decode,
LoRA's target modules exist in the model, a reward model's parser and path, sync.transport's own requirements,
the cluster at scheduler.address answers. Each failure is a ConfigError naming the key or the file and line, the
value, and what is expected."""

from __future__ import annotations

import inspect
import os
import socket
from pathlib import Path

from rayrl.config import Config, ConfigError
from rayrl.data import PromptTemplate, load_tasks
from rayrl.data.images import BadImages, check_task_images
from rayrl.engines.registry import teacher_engine, transport_plan
from rayrl.imports import load_object
from rayrl.demo.policy import demo_tokenizer, qwen2_config
from rayrl.models.lora import check_targets
from rayrl.models.tokenizer import load_tokenizer
from rayrl.models.vision import PLACEHOLDER, check_vision_model, expanded_image_tokens
from rayrl.rewards.registry import load_reward_fn
from rayrl.types import Task


def check_reward_fn(spec: str) -> None:
    """Importable here, from sys.path or the working directory (as the reward actors will import it)."""
    try:
        fn = load_reward_fn(spec, [os.getcwd()])
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise ConfigError(f"reward.fn '{spec}' must take two arguments (sample, task); its signature is "
                          f"{inspect.signature(fn)}") from None
    except ValueError:  # a builtin without a signature: it will tell at call time
        pass


def check_workflow(cfg: Config) -> None:
    """rollout.workflow names a class with arun_episode; agent.fn (OpenAIAgent) an async function."""
    try:
        cls = load_object(cfg.rollout.workflow, "rollout.workflow", [os.getcwd()], "class")
        fn = load_object(cfg.agent.fn, "agent.fn", [os.getcwd()], "function") if cfg.agent.fn else None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if not inspect.isclass(cls) or not inspect.iscoroutinefunction(getattr(cls, "arun_episode", None)):
        raise ConfigError(f"rollout.workflow '{cfg.rollout.workflow}' must be a class with "
                          "`async def arun_episode(self, engine, task)` (see rayrl.workflows.base.Workflow)")
    if fn is not None and not inspect.iscoroutinefunction(fn):
        raise ConfigError(f"agent.fn '{cfg.agent.fn}' must be an async function (client, task) -> reward or None")


def check_teacher(cfg: Config) -> None:
    """teacher.enabled: a model directory whose tokenizer is the policy's, token for token."""
    t = cfg.teacher
    if not t.enabled:
        return
    if not (Path(t.path).expanduser() / "config.json").is_file():
        raise ConfigError(f"teacher.path '{t.path}' is not a Hugging Face model directory (no config.json)")
    try:
        teacher_engine(t.engine)
    except (ValueError, ImportError, AttributeError) as err:
        raise ConfigError(f"teacher.engine '{t.engine}': {err}") from None
    from rayrl.demo.policy import demo_tokenizer
    from rayrl.models.tokenizer import load_tokenizer

    policy = cfg.model.path or f"the demo policy's ({cfg.data.task})"
    student = load_tokenizer(cfg.model.path) if cfg.model.path else demo_tokenizer(cfg.data)
    teacher = load_tokenizer(t.path)
    if student.get_vocab() != teacher.get_vocab():
        differ = sorted(set(student.get_vocab().items()) ^ set(teacher.get_vocab().items()))[:3]
        raise ConfigError(f"teacher.path '{t.path}' has another tokenizer than model.path {policy}: "
                          f"{len(teacher)} against {len(student)} tokens (first differences: {differ}); the teacher "
                          "scores the student's token ids, so both need the same vocabulary")


def check_paths(cfg: Config) -> None:
    if cfg.model.path is not None and not (Path(cfg.model.path).expanduser() / "config.json").is_file():
        raise ConfigError(f"model.path '{cfg.model.path}' is not a Hugging Face model directory (no config.json); "
                          "expected a local directory, or leave it unset to build the small model")
    if cfg.data.task == "gsm8k" and cfg.data.path is not None and not Path(cfg.data.path).expanduser().is_file():
        raise ConfigError(f"data.path '{cfg.data.path}' is not a file; expected a jsonl of question / answer lines")
    _directory("metrics.run_dir", cfg.metrics.run_dir)
    if cfg.model.path is None:
        _directory("demo.cache_dir", cfg.demo.cache_dir)


def _directory(key: str, value: str) -> None:
    """The path is a directory, or can become one (its nearest existing parent is a directory)."""
    path = Path(value).expanduser()
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{key} '{value}': '{parent}' is a file, not a directory")
            break


def check_data(cfg: Config) -> tuple[list[Task], list[Task]]:
    """The task's problems load (file, fields, answers) and leave some to train on; returns (train, held out)."""
    if cfg.data.task == "gsm8k" and cfg.model.path is None:
        raise ConfigError("data.task=gsm8k needs model.path (a local Hugging Face model directory); the demo model "
                          "is built for data.task=arithmetic and word_problems")
    try:
        return load_tasks(cfg.data)
    except (ValueError, OSError) as err:
        raise ConfigError(f"data: {err}") from None


def check_micro_batch(cfg: Config, tasks: list[Task]) -> None:
    """learner.max_tokens_per_micro_batch holds the longest prompt plus rollout.max_new_tokens."""
    if cfg.model.path is not None:
        tokenizer = load_tokenizer(str(Path(cfg.model.path).expanduser()))
    else:
        tokenizer = demo_tokenizer(cfg.data)
    template = PromptTemplate(tokenizer)
    processor = image_processor(cfg) if any(t.images for t in tasks) else None
    # an image's single pad in the encoded prompt becomes its expanded image tokens
    longest = max(len(template.encode(t)) + (expanded_image_tokens(t.images, processor) - len(t.images)
                                              if t.images else 0) for t in tasks) + cfg.rollout.max_new_tokens
    if longest > cfg.learner.max_tokens_per_micro_batch:
        raise ConfigError(f"learner.max_tokens_per_micro_batch={cfg.learner.max_tokens_per_micro_batch} is below one "
                          f"sequence: the longest prompt plus rollout.max_new_tokens is {longest} tokens; raise it to "
                          f"at least {longest}")


def image_processor(cfg: Config):
    """The policy's image processor: model.path's, or the demo vision model's."""
    if cfg.model.path is None:
        from rayrl.demo.vision_policy import image_processor as demo_processor

        return demo_processor()
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(str(Path(cfg.model.path).expanduser()))


def demo_config(cfg: Config):
    """The architecture config of the demo policy that data.task builds (no weights)."""
    tokenizer = demo_tokenizer(cfg.data)
    if cfg.data.task == "visual_arithmetic":
        from rayrl.demo.vision_policy import qwen2_vl_config

        d = cfg.demo
        return qwen2_vl_config(tokenizer, d.hidden_size, d.intermediate_size, d.num_layers, d.num_heads,
                               d.num_kv_heads, d.vision_depth, d.vision_dim, d.max_position_embeddings)
    return qwen2_config(cfg.demo, len(tokenizer), tokenizer)


def check_images(cfg: Config, tasks: list[Task]) -> None:
    """Tasks with images need a vision-language policy, and one placeholder in the prompt per image."""
    with_images = [t for t in tasks if t.images]
    if not with_images:
        return
    if cfg.rollout.bitwise_on_policy:
        raise ConfigError(f"task {with_images[0].id!r} carries images: the bitwise on-policy mode takes text only "
                          "so far; set rollout.bitwise_on_policy=false")
    most = max(with_images, key=lambda t: len(t.images))
    if cfg.rollout.engine == "vllm" and len(most.images) > cfg.vllm.max_images_per_prompt:
        raise ConfigError(f"task {most.id!r} carries {len(most.images)} images, more than "
                          f"vllm.max_images_per_prompt={cfg.vllm.max_images_per_prompt}; raise it")
    for t in with_images:
        try:
            check_task_images(t.prompt, t.images, t.id)
        except BadImages as err:
            raise ConfigError(f"data: {err}; write one {PLACEHOLDER} per image, each a picture") from None
    if cfg.model.path is not None:
        from transformers import AutoConfig

        config, key = AutoConfig.from_pretrained(str(Path(cfg.model.path).expanduser())), "model.path"
    else:
        config, key = demo_config(cfg), f"the demo model of data.task={cfg.data.task}"
    try:
        check_vision_model(config, with_images[0].id)
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None


def check_lora(cfg: Config) -> None:
    """PEFT is installed and lora.target_modules name linear layers of the model (its skeleton, no weights)."""
    if not cfg.lora.enabled:
        return
    import torch
    from transformers import AutoConfig

    from rayrl.models.policy import model_class

    if cfg.model.path:
        config = AutoConfig.from_pretrained(str(Path(cfg.model.path).expanduser()))
    else:  # the demo model's architecture, as it will be built
        config = demo_config(cfg)
    with torch.device("meta"):
        skeleton = model_class(config).from_config(config)
    try:
        check_targets(skeleton, cfg.lora.target_modules)
    except (ImportError, ValueError) as err:
        raise ConfigError(str(err)) from None


def check_reward_model(cfg: Config) -> None:
    """reward.model: its parser imports (judge), its path is a model directory or the demo can build one."""
    m = cfg.reward.model
    if m.kind == "none":
        return
    if m.kind == "judge":
        try:
            load_object(m.parser, "reward.model.parser", [os.getcwd()], "function")
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if m.path is not None and not (Path(m.path).expanduser() / "config.json").is_file():
        raise ConfigError(f"reward.model.path '{m.path}' is not a Hugging Face model directory (no config.json); "
                          f"expected a local directory, or leave it unset to build the demo {m.kind}")
    if m.path is None and cfg.data.task != "arithmetic":
        raise ConfigError(f"reward.model.path is unset and data.task={cfg.data.task}: the demo {m.kind} is built "
                          "for data.task=arithmetic only; give reward.model.path")


def check_address(cfg: Config) -> None:
    """scheduler.type=ray with host:port: a TCP connection to the GCS within scheduler.connect_timeout_s."""
    s = cfg.scheduler
    if s.type != "ray" or s.address == "auto" or s.address.startswith("ray://"):
        return
    host, _, port = s.address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"scheduler.address '{s.address}' must be host:port (the head's GCS), 'auto' or ray://...")
    try:
        socket.create_connection((host, int(port)), timeout=s.connect_timeout_s).close()
    except OSError as err:
        raise ConfigError(f"scheduler.address '{s.address}': no Ray cluster answers there within "
                          f"{s.connect_timeout_s}s ({err}); start one with `ray start --head` or fix the address") from None


def transport_fits(c: Config) -> str | None:
    """sync.transport's own requirements (each transport owns them: rayrl.engines.transport), and an engine-process
    receiver wherever the weights arrive in the engine's process (the hf engine, vLLM's LoRA adapters)."""
    try:
        plan = transport_plan(c.sync.transport)
    except ValueError as err:
        return str(err)
    if (why := plan.requirements(c)) is not None:
        return why
    if plan.receiver() is None and (c.rollout.engine == "hf" or c.lora.enabled):
        return (f"sync.transport={c.sync.transport} reaches vLLM's workers only; with rollout.engine=hf or "
                "lora.enabled the weights arrive in the engine's own process: use sync.transport=gloo or ipc")
    return None


def check_transport(cfg: Config) -> None:
    if (why := transport_fits(cfg)) is not None:
        raise ConfigError(why)


def check_given_tasks(tasks) -> tuple[list[Task], list[Task]]:
    """A caller's own (train, held-out) tasks instead of data.*: two lists of Task, some to train on, ids unique."""
    if not (isinstance(tasks, (tuple, list)) and len(tasks) == 2
            and all(isinstance(part, list) and all(isinstance(t, Task) for t in part) for part in tasks)):
        raise ConfigError("tasks must be (train, held_out): two lists of rayrl.types.Task")
    train, held_out = tasks
    if not train:
        raise ConfigError("tasks: the training list is empty")
    seen: set[str] = set()
    for t in [*train, *held_out]:
        if t.id in seen:
            raise ConfigError(f"tasks: task ids repeat (e.g. {t.id!r}); give each task its own id")
        seen.add(t.id)
    return list(train), list(held_out)


def preflight(cfg: Config, tasks=None) -> tuple[list[Task], list[Task]]:
    """Every check; returns the (train, held-out) problems: data.*'s, loaded while checking them, or the caller's
    own (tasks), checked alike."""
    check_reward_fn(cfg.reward.fn)
    check_workflow(cfg)
    check_paths(cfg)
    tasks = check_data(cfg) if tasks is None else check_given_tasks(tasks)
    check_images(cfg, [*tasks[0], *tasks[1]])  # first: the micro-batch check reads the pictures' sizes
    check_micro_batch(cfg, [*tasks[0], *tasks[1]])
    check_lora(cfg)
    check_reward_model(cfg)
    check_teacher(cfg)
    check_transport(cfg)
    check_address(cfg)
    return tasks

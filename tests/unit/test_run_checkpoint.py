"""The driver's checkpoint files: atomic commit, keep, finding the one to resume, storage check."""

import json

import pytest

from rayrl.buffer import Ledger
from rayrl import checkpoint
from rayrl.checkpoint import RunState, StorageError
from rayrl.config import load_config
from rayrl.trainer import Trainer
from rayrl.types import Sample, Task, TrajectoryGroup


def _state(step: int) -> RunState:
    return RunState(step=step, version=step, fed=8 * step + 16, pending=[8 * step, 8 * step + 1], samples=32 * step,
                    eval_accuracy_before=0.2, ledger=Ledger(produced=4 * step + 1, trained=4 * step), wandb_id="abc")


def _group(step: int) -> TrajectoryGroup:
    sample = Sample(f"t@{8 * step}", [1, 2], [3], [-0.5], [step], "stop", reward=1.0, reward_status="ok")
    return TrajectoryGroup(Task(f"t@{8 * step}", "1+1=", "2"), [sample])


def test_commit_keeps_the_newest_and_resume_finds_only_complete_ones(tmp_path):
    for step in (3, 6, 9):
        tmp = checkpoint.begin(tmp_path, step)
        (tmp / "learner").mkdir()
        checkpoint.commit(tmp, tmp_path, _state(step), [_group(step)], keep=2)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-00000006", "step-00000009"]
    crashed = checkpoint.begin(tmp_path, 12)  # a crash mid-write: a temporary directory without a manifest
    newest = checkpoint.find_resume("auto", tmp_path)
    assert newest.name == "step-00000009" and checkpoint.load_state(newest) == _state(9)
    assert checkpoint.load_groups(newest) == [_group(9)]  # the buffer's finished groups, as they were
    assert checkpoint.find_resume("never", tmp_path) is None
    assert checkpoint.find_resume("auto", tmp_path / "nothing-here") is None
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoint.find_resume(str(crashed), tmp_path)


def test_a_save_of_an_earlier_learner_life_never_reaches_the_checkpoint(tmp_path):
    """A learner rank frozen mid-save (its node declared dead, the group re-formed without it) that wakes up and
    writes its shard: the step's save made since went to a directory of its own, and the committed checkpoint
    holds that save's files only; the earlier save's directory is gone or never committed."""
    old = checkpoint.begin(tmp_path, 6)
    (old / "learner").mkdir()
    new = checkpoint.begin(tmp_path, 6)  # the re-formed group saves the same step again
    assert new != old and not old.exists()
    (new / "learner").mkdir()
    (new / "learner" / "shard-1").write_text("new life")
    (old / "learner").mkdir(parents=True)  # the woken rank's writer creates its directory again
    (old / "learner" / "shard-1").write_text("earlier life")
    final = checkpoint.commit(new, tmp_path, _state(6), [_group(6)], keep=2)
    assert (final / "learner" / "shard-1").read_text() == "new life"
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-00000006"]


def test_truncate_metrics_drops_later_steps_and_the_summary(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in [{"step": 1}, {"step": 2}, {"step": 3}, {"summary": {}}]))
    checkpoint.truncate_metrics(f, 2)
    assert [json.loads(x) for x in f.read_text().splitlines()] == [{"step": 1}, {"step": 2}]


def test_a_checkpoint_directory_that_cannot_be_written_stops_the_run_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "checkpoints"
    with pytest.raises(StorageError, match=f"checkpoint directory '{bad}' is not writable"):
        checkpoint.check_writable(bad)
    cfg = load_config(None, [f"metrics.run_dir={tmp_path}", "checkpoint.every_steps=5", f"checkpoint.dir={bad}",
                             "data.eval_size=10"])
    with pytest.raises(StorageError, match="checkpoint.dir"):
        Trainer(cfg)  # before Ray or any model starts


def test_the_cli_exits_non_zero_naming_a_checkpoint_directory_it_cannot_write(tmp_path, capsys):
    from rayrl.cli import main

    (tmp_path / "a-file").write_text("")
    bad = tmp_path / "a-file" / "checkpoints"
    with pytest.raises(SystemExit) as stop:
        main(["train", f"metrics.run_dir={tmp_path}", f"checkpoint.dir={bad}", "data.eval_size=10"])
    assert stop.value.code == 1 and f"checkpoint directory '{bad}' is not writable" in capsys.readouterr().err


def test_prompt_stream_positions_repeat_after_a_restore():
    from rayrl.data import PromptStream, split, stream_position

    tasks = split(load_config(None, ["data.eval_size=10"]).data)[0]
    first = PromptStream(tasks, seed=3).take(len(tasks) + 5)  # into the second epoch
    assert [stream_position(t.id) for t in first] == list(range(len(first)))
    again = PromptStream(tasks, seed=3)
    refed = again.restore(len(first), [2, len(first) - 1])
    assert refed == [first[2], first[-1]] and again.fed == len(first)
    assert again.take(1)[0].id.endswith(f"@{len(first)}")


def test_the_shared_storage_check_names_the_node_and_the_path():
    from rayrl.placement.storage import unshared_error

    nodes = {"a": "10.0.0.1", "b": "10.0.0.2"}
    assert unshared_error("/ckpt", nodes, {"a": "", "b": ""}, {"a": ["a", "b"], "b": ["b", "a"]}) is None
    local = unshared_error("/ckpt", nodes, {"a": "", "b": ""}, {"a": ["a"], "b": ["b"]})
    assert local.startswith("checkpoint directory '/ckpt' is not shared: node 10.0.0.1 does not see the markers "
                            "written by node(s) 10.0.0.2")
    readonly = unshared_error("/ckpt", nodes, {"a": "", "b": "cannot write there (Read-only file system)"}, {})
    assert readonly.startswith("checkpoint directory '/ckpt' on node 10.0.0.2: cannot write there (Read-only")


def test_a_rerun_of_a_finished_name_gets_a_new_directory_and_a_killed_one_continues(tmp_path):
    from rayrl.driver.run_directory import RunDirectory

    def run_dir(*overrides: str) -> RunDirectory:
        cfg = load_config(None, [f"metrics.run_dir={tmp_path}", "metrics.run_name=straight", *overrides])
        return RunDirectory(cfg.metrics, cfg.checkpoint)

    first = run_dir()
    assert first.path == tmp_path / "straight" and first.resume_from is None
    first.path.mkdir(exist_ok=True)
    (first.path / "metrics.jsonl").write_text('{"step": 1}\n')
    assert run_dir("checkpoint.resume=never").path == tmp_path / "straight-2"  # the finished run untouched
    (tmp_path / "straight-2").mkdir(exist_ok=True)
    (tmp_path / "straight-2" / "metrics.jsonl").write_text('{"step": 1}\n')
    assert run_dir().path == tmp_path / "straight-3"  # nothing to continue: never appended to
    tmp = checkpoint.begin(first.checkpoints, 3)
    (tmp / "learner").mkdir()
    checkpoint.commit(tmp, first.checkpoints, _state(3), [], keep=2)
    again = run_dir()  # resume=auto with a complete checkpoint: the same directory, from it
    assert again.path == tmp_path / "straight" and again.resume_from.name == "step-00000003"

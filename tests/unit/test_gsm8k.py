"""GSM8K data format, answer parsing and reward."""

from __future__ import annotations

import json

import pytest

from rayrl.config import load_config
from rayrl.data.gsm8k import final_answer, split_gsm8k, write_synthetic_gsm8k
from rayrl.rewards.gsm8k import answer_match, parse_answer
from rayrl.types import Sample, Task


def test_final_answer_and_parser():
    assert final_answer("3 * 4 = 12\n#### 1,234") == "1234"
    with pytest.raises(ValueError, match="####"):
        final_answer("no marker here")
    assert parse_answer("so 5 + 7 = 12.\n#### 12") == "12"
    assert parse_answer("She has 3 then 18 left.") == "18"
    assert parse_answer("#### -4.5") == "-4.5"
    assert parse_answer("none at all") is None


def _sample(text: str) -> Sample:
    return Sample("r", [1], [5], [-0.1], [0], "stop", text=text)


def test_reward_scores_final_number():
    task = Task("t", "q", "18")
    assert answer_match(_sample("3 * 6 = 18\n#### 18"), task).reward == 1.0
    assert answer_match(_sample("#### 18.0"), task).reward == 1.0
    wrong = answer_match(_sample("#### 17"), task)
    assert wrong.reward == 0.0 and wrong.reason == "wrong answer"
    assert answer_match(_sample("I do not know"), task).reason.startswith("no number")


def test_synthetic_file_round_trips_and_splits(tmp_path):
    path = write_synthetic_gsm8k(tmp_path / "g.jsonl", 50, seed=1)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 50 and all(r["answer"].splitlines()[-1].startswith("#### ") for r in rows)
    cfg = load_config(None, ["data.task=gsm8k", f"data.path={path}", "data.eval_size=10"])
    train, held_out = split_gsm8k(cfg.data)
    assert len(train) == 40 and len(held_out) == 10
    assert not {t.id for t in train} & {t.id for t in held_out}
    t = held_out[0]
    assert t.prompt.startswith("Question: ") and t.prompt.endswith("\nAnswer:") and t.answer.lstrip("-").isdigit()


def test_bad_inputs_name_the_knob(tmp_path):
    cfg = load_config(None, ["data.task=gsm8k", f"data.path={tmp_path / 'missing.jsonl'}"])
    with pytest.raises(ValueError, match="data.path"):
        split_gsm8k(cfg.data)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"q": "x"}) + "\n")
    cfg = load_config(None, ["data.task=gsm8k", f"data.path={bad}"])
    with pytest.raises(ValueError, match="'question' and 'answer'"):
        split_gsm8k(cfg.data)

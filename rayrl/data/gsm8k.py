"""GSM8K: grade-school word problems whose reference answers end in '#### <number>'.

Read from a local jsonl ({"question", "answer"} per line, the dataset's own format) or, where the hub
is reachable, from Hugging Face datasets. write_synthetic_gsm8k makes a file of the same format offline.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from rayrl.config import DataConfig
from rayrl.types import Task

PROMPT = "Question: {question}\nAnswer:"
FINAL_ANSWER = re.compile(r"####\s*(-?[\d,]*\.?\d+)")  # GSM8K's marked final answer


def final_answer(answer: str) -> str:
    """The number after '####' in a GSM8K answer, commas removed."""
    match = FINAL_ANSWER.search(answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return match.group(1).replace(",", "")


def _read_jsonl(path: Path) -> list[dict]:
    """GSM8K's own format, one {"question", "answer"} object per line; a bad line raises naming the file and line."""
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not a JSON object ({err.msg}); expected {{\"question\": ..., \"answer\": ...}}") \
                from None
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) \
                or not isinstance(row.get("answer"), str):
            got = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{where}: expected string keys 'question' and 'answer', got {got}")
        if FINAL_ANSWER.search(row["answer"]) is None:
            raise ValueError(f"{where}: the answer has no '#### <number>' line: {row['answer'][-60:]!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no problems in it; expected GSM8K's jsonl, one {{question, answer}} per line")
    return rows


def _read_hub(name: str) -> list[dict]:
    try:
        from datasets import load_dataset

        return list(load_dataset(name, "main", split="train"))
    except Exception as err:  # offline, missing package, unknown name
        raise ValueError(f"could not load '{name}' from Hugging Face ({type(err).__name__}: {err}); "
                         "set data.path to a local GSM8K jsonl") from None


def split_gsm8k(cfg: DataConfig) -> tuple[list[Task], list[Task]]:
    """(train, held_out) from data.path (or data.hf_dataset when no path is given)."""
    if cfg.path is not None:
        path = Path(cfg.path).expanduser()
        if not path.is_file():
            raise ValueError(f"data.path '{cfg.path}' does not exist; give a GSM8K-format jsonl")
        rows = _read_jsonl(path)
    else:
        rows = _read_hub(cfg.hf_dataset)
    tasks = [Task(id=f"gsm8k-{i}", prompt=PROMPT.format(question=r["question"].strip()),
                  answer=final_answer(r["answer"])) for i, r in enumerate(rows)]
    if cfg.eval_size >= len(tasks):
        raise ValueError(f"data.eval_size={cfg.eval_size} leaves no training problems out of {len(tasks)}")
    random.Random(cfg.seed).shuffle(tasks)
    return tasks[cfg.eval_size:], tasks[: cfg.eval_size]


_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"]
_ITEMS = ["apples", "books", "marbles", "stamps", "cookies", "pencils"]


def write_synthetic_gsm8k(path: str | Path, n: int, seed: int = 0) -> Path:
    """n two-step word problems in GSM8K's jsonl format (worked answer ending in '#### N')."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        who, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        a, b, c = rng.randint(2, 40), rng.randint(2, 9), rng.randint(1, 30)
        total = a * b - c
        q = (f"{who} buys {b} boxes of {item} with {a} {item} in each box, then gives away {c} {item}. "
             f"How many {item} does {who} have now?")
        ans = f"{who} buys {a} * {b} = {a * b} {item}.\nAfter giving away {c}: {a * b} - {c} = {total}.\n#### {total}"
        lines.append(json.dumps({"question": q, "answer": ans}))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return out

"""Test installs only: PyPI's torchvision wheel is built against CUDA torch, so beside the CPU torch its compiled
operators (nms, roi_align, ...) cannot load, and its import then fails on two fake-kernel registrations for them.
vLLM's Qwen2-VL processor needs torchvision's Python code (its image and video processors), none of those operators.
This removes the operator library that cannot load and lets the two registrations skip, as torchvision's other
registrations already do when its operators are absent.

    python tests/torchvision_python_only.py      (after pip install --no-deps torchvision==0.28.0)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

GUARD = "torchvision.extension._has_ops()"


def main() -> None:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        sys.exit("torchvision is not installed: pip install --no-deps torchvision==0.28.0 first")
    root = Path(spec.origin).parent
    for library in root.glob("_C*.so"):
        library.unlink()
    meta = root / "_meta_registrations.py"
    text = meta.read_text()
    for op in ("nms", "qnms"):
        line = f'@torch.library.register_fake("torchvision::{op}")'
        if line in text:
            text = text.replace(line, f'@(torch.library.register_fake("torchvision::{op}") if {GUARD} else (lambda f: f))')
    if "register_fake(\"torchvision::nms\") if" not in text:
        sys.exit(f"{meta}: the nms registration was not found; this torchvision differs from 0.28.0")
    meta.write_text(text)


if __name__ == "__main__":
    main()

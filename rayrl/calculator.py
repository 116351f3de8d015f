"""The calculator's evaluator: safe arithmetic on a string, shared by the word-problem data (answers and
warm-up transcripts) and the calculator tool agents call."""

from __future__ import annotations

import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate_arithmetic(expression: str) -> str:
    """+, -, *, /, //, %, parentheses and numbers only (no names, no calls, no powers); ints stay ints."""
    def ev(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")

    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")
    value = ev(ast.parse(expression, mode="eval").body)
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"

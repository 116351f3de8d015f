"""Fixtures the tests and benchmarks share: random-weight models of real shapes (random_qwen2)."""

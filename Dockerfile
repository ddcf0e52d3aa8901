# syntax=docker/dockerfile:1
# trtwarm images. Two targets:
#   docker build --target init    -t trtwarm-init:0.1.0 .     # CUDA runtime + the pinned TensorRT: runs `trtwarm init`
#   docker build --target sidecar -t trtwarm-sidecar:0.1.0 .  # slim, no CUDA, no TensorRT: `trtwarm sidecar`, gc, ls
# The init image's TensorRT must equal your inference server's TensorRT exactly (engines are version-locked):
# set TENSORRT_VERSION (and TENSORRT_PACKAGE=tensorrt-cu13 with a CUDA 13 base for driver r580+) to the server's,
# or install trtwarm into the inference image itself (README: "TensorRT versions").
ARG PYTHON_IMAGE=python:3.12-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.9.1-runtime-ubuntu24.04

# ---- the wheel, built once ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY trtwarm ./trtwarm
RUN pip wheel --no-deps --no-cache-dir -w /wheels .

# ---- init: CUDA runtime + TensorRT (the README's install step: pip install 'trtwarm[tensorrt]') -------------------
FROM ${CUDA_IMAGE} AS init
ARG TENSORRT_PACKAGE=tensorrt-cu12
ARG TENSORRT_VERSION=10.16.1.11
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="trtwarm-init" \
      org.opencontainers.image.description="Build TensorRT engines once per cache key; every other Pod reuses them" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/trtwarm/trtwarm" \
      io.trtwarm.tensorrt.version="${TENSORRT_VERSION}"
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 1000 --create-home --home-dir /home/trtwarm --shell /usr/sbin/nologin trtwarm
ENV VIRTUAL_ENV=/opt/trtwarm PATH=/opt/trtwarm/bin:$PATH HOME=/home/trtwarm PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/trtwarm \
    && pip install "$(ls /wheels/trtwarm-*.whl)[tensorrt,kubernetes]" "${TENSORRT_PACKAGE}==${TENSORRT_VERSION}" \
    && python -m compileall -q /opt/trtwarm \
    && rm -rf /wheels
COPY --chmod=0755 cmd/trtwarm-init cmd/trtwarm-sidecar /usr/local/bin/
USER 1000:1000
WORKDIR /home/trtwarm
ENTRYPOINT ["trtwarm-init"]

# ---- sidecar: metrics, readiness, leases, gc; only what those import ----------------------------------------------
FROM ${PYTHON_IMAGE} AS sidecar
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="trtwarm-sidecar" \
      org.opencontainers.image.description="trtwarm metrics, readiness and cache lifecycle (no CUDA, no TensorRT)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/trtwarm/trtwarm"
ENV HOME=/home/trtwarm PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=wheel /wheels /wheels
# --no-deps: the sidecar, gc, ls, stats and verify need filelock and prometheus-client only (onnx and onnxruntime
# are for building, in the init image).
RUN useradd --uid 1000 --create-home --home-dir /home/trtwarm --shell /usr/sbin/nologin trtwarm \
    && pip install --no-deps /wheels/trtwarm-*.whl && pip install "filelock>=4.3,<5" "prometheus-client>=0.20" \
    && python -m compileall -q /usr/local/lib && rm -rf /wheels
COPY --chmod=0755 cmd/trtwarm-init cmd/trtwarm-sidecar /usr/local/bin/
USER 1000:1000
WORKDIR /home/trtwarm
EXPOSE 9400
ENTRYPOINT ["trtwarm-sidecar"]

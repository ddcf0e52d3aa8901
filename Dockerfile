# trtwarm images; no `# syntax=` line, so no frontend image is fetched (Docker's built-in frontend or podman/buildah).
# Build with images/build.sh, which also turns /opt/trtwarm/labels (computed inside the build) into image labels:
#   images/build.sh init    trtwarm-init:0.1.0      # BASE_IMAGE + trtwarm + the TensorRT asked for: `trtwarm init`
#   images/build.sh sidecar trtwarm-sidecar:0.1.0   # slim, no CUDA/TensorRT/onnx: `trtwarm sidecar`, gc, ls, verify
# Init build args (README "Images" has a recipe for each case):
#   BASE_IMAGE        any image with Python 3.10+ (python3-venv is apt-installed where missing), e.g. your inference
#                     server's image, so the init runs on the server's own TensorRT (then TENSORRT_PACKAGE="")
#   TENSORRT_PACKAGE  pip distribution to install (tensorrt-cu12, tensorrt-cu13); "" installs none
#   TENSORRT_VERSION  its exact version; "" takes the newest. Engines are version-locked: match the server's
#   CUDA_BINDINGS     cuda-bindings for `trtwarm selftest` (auto: 12.x for a -cu12 package, 13.x for -cu13); "" none
#   TRTWARM_UID/GID   the non-root ids (1000, as the chart's runAsUser); an existing account with that uid is reused
# Both: PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, PIP_NO_INDEX=1 (a mirror, or offline: wheels put in
# images/wheelhouse/ are offered to every pip step through a bind mount, never a layer), REVISION, CREATED.
ARG BASE_IMAGE=nvidia/cuda:12.9.1-runtime-ubuntu24.04
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# ---- the trtwarm wheel, built once ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS dist
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_NO_INDEX=
ARG PIP_FIND_LINKS=/wheelhouse
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY trtwarm ./trtwarm
RUN --mount=type=bind,source=images/wheelhouse,target=/wheelhouse \
    python3 -m venv /tmp/pip && /tmp/pip/bin/pip wheel --no-deps -w /dist . && rm -rf /tmp/pip

# ---- init: BASE_IMAGE + trtwarm (+ TensorRT when asked) ---------------------------------------------------------
FROM ${BASE_IMAGE} AS init
ARG TRTWARM_UID=1000
ARG TRTWARM_GID=1000
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_NO_INDEX=
ARG PIP_FIND_LINKS=/wheelhouse
ENV VIRTUAL_ENV=/opt/trtwarm PATH=/opt/trtwarm/bin:$PATH HOME=/home/trtwarm PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --chmod=0755 images/setup-base.sh images/labels.py /usr/local/lib/trtwarm/
COPY --chmod=0755 cmd/trtwarm-init cmd/trtwarm-sidecar /usr/local/bin/
RUN /usr/local/lib/trtwarm/setup-base.sh "${TRTWARM_UID}" "${TRTWARM_GID}"
# --system-site-packages: a TensorRT the base image already has (an inference server's) stays importable.
# trtwarm without the `tensorrt` extra: its pin must never fight the TensorRT asked for below.
COPY --from=dist /dist/ /tmp/dist/
RUN --mount=type=bind,source=images/wheelhouse,target=/wheelhouse \
    python3 -m venv --system-site-packages /opt/trtwarm \
    && pip install "$(ls /tmp/dist/trtwarm-*.whl)[kubernetes]" \
    && python -m compileall -q /opt/trtwarm && rm -rf /tmp/dist
# Declared here so that changing them reuses the layers above.
ARG TENSORRT_PACKAGE=tensorrt-cu12
ARG TENSORRT_VERSION=10.16.1.11
ARG CUDA_BINDINGS=auto
RUN --mount=type=bind,source=images/wheelhouse,target=/wheelhouse \
    cuda="${CUDA_BINDINGS}"; \
    if [ "$cuda" = auto ]; then case "${TENSORRT_PACKAGE}" in \
      *-cu12*) cuda="cuda-bindings>=12.9,<13" ;; *-cu13*) cuda="cuda-bindings>=13,<14" ;; *) cuda="" ;; esac; fi; \
    if [ -n "${TENSORRT_PACKAGE}" ]; then \
      pip install "${TENSORRT_PACKAGE}${TENSORRT_VERSION:+==${TENSORRT_VERSION}}" ${cuda:+"$cuda"}; fi
ARG BASE_IMAGE
ARG REVISION=unknown
ARG CREATED=unknown
RUN python /usr/local/lib/trtwarm/labels.py init "${BASE_IMAGE}" "${REVISION}" "${CREATED}" \
      "${TENSORRT_PACKAGE:+${TENSORRT_VERSION}}" > /opt/trtwarm/labels \
    && cat /opt/trtwarm/labels
LABEL org.opencontainers.image.title="trtwarm-init" \
      org.opencontainers.image.description="Build TensorRT engines once per cache key; every other Pod reuses them" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/trtwarm/trtwarm"
USER ${TRTWARM_UID}:${TRTWARM_GID}
WORKDIR /home/trtwarm
ENTRYPOINT ["trtwarm-init"]

# ---- sidecar: metrics, readiness, leases, gc; only what those import ----------------------------------------------
FROM ${PYTHON_IMAGE} AS sidecar
ARG TRTWARM_UID=1000
ARG TRTWARM_GID=1000
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_NO_INDEX=
ARG PIP_FIND_LINKS=/wheelhouse
ARG PYTHON_IMAGE
ENV VIRTUAL_ENV=/opt/trtwarm PATH=/opt/trtwarm/bin:$PATH HOME=/home/trtwarm PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --chmod=0755 images/setup-base.sh images/labels.py /usr/local/lib/trtwarm/
COPY --chmod=0755 cmd/trtwarm-init cmd/trtwarm-sidecar /usr/local/bin/
RUN /usr/local/lib/trtwarm/setup-base.sh "${TRTWARM_UID}" "${TRTWARM_GID}"
# trtwarm --no-deps: the sidecar, gc, ls, stats and verify need filelock, prometheus-client and (for signatures,
# `verify --trust-policy`) cryptography only; onnx and onnxruntime are for building, in the init image.
# tests/test_images.py keeps these pins equal to pyproject.toml's.
COPY --from=dist /dist/ /tmp/dist/
RUN --mount=type=bind,source=images/wheelhouse,target=/wheelhouse \
    python3 -m venv /opt/trtwarm \
    && pip install "filelock>=4.3,<5" "prometheus-client>=0.20" "cryptography>=42" \
    && pip install --no-deps /tmp/dist/trtwarm-*.whl \
    && python -m compileall -q /opt/trtwarm && rm -rf /tmp/dist
ARG REVISION=unknown
ARG CREATED=unknown
RUN python /usr/local/lib/trtwarm/labels.py sidecar "${PYTHON_IMAGE}" "${REVISION}" "${CREATED}" > /opt/trtwarm/labels
LABEL org.opencontainers.image.title="trtwarm-sidecar" \
      org.opencontainers.image.description="trtwarm metrics, readiness and cache lifecycle (no CUDA, no TensorRT)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/trtwarm/trtwarm"
USER ${TRTWARM_UID}:${TRTWARM_GID}
WORKDIR /home/trtwarm
EXPOSE 9400
ENTRYPOINT ["trtwarm-sidecar"]

# ---- init-pull: pull-only consumers of the central engine repository (trtwarm init --read-only --remote) ---------
# No CUDA, no TensorRT, no onnxruntime: the engine comes from the repository (obstore for s3://, the standard
# library for oci://), the GPU from NVML (libnvidia-ml is mounted by the NVIDIA container toolkit), the TensorRT version from
# --tensorrt-version (TRTWARM_TENSORRT_VERSION).
# onnx stays: the key holds the model's digests and the shapes are checked against its inputs.
# Built like the others: images/build.sh init-pull TAG (tests/test_images.py runs it as a pull-only consumer).
FROM ${PYTHON_IMAGE} AS init-pull
ARG TRTWARM_UID=1000
ARG TRTWARM_GID=1000
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_NO_INDEX=
ARG PIP_FIND_LINKS=/wheelhouse
ARG PYTHON_IMAGE
ENV VIRTUAL_ENV=/opt/trtwarm PATH=/opt/trtwarm/bin:$PATH HOME=/home/trtwarm PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --chmod=0755 images/setup-base.sh images/labels.py /usr/local/lib/trtwarm/
COPY --chmod=0755 cmd/trtwarm-init cmd/trtwarm-sidecar /usr/local/bin/
RUN /usr/local/lib/trtwarm/setup-base.sh "${TRTWARM_UID}" "${TRTWARM_GID}"
COPY --from=dist /dist/ /tmp/dist/
RUN --mount=type=bind,source=images/wheelhouse,target=/wheelhouse \
    python3 -m venv /opt/trtwarm \
    && pip install "filelock>=4.3,<5" "onnx>=1.16" "nvidia-ml-py>=12.560" "obstore>=0.12,<0.13" \
       "cryptography>=42" \
    && pip install --no-deps /tmp/dist/trtwarm-*.whl \
    && python -m compileall -q /opt/trtwarm && rm -rf /tmp/dist
ARG REVISION=unknown
ARG CREATED=unknown
RUN python /usr/local/lib/trtwarm/labels.py init-pull "${PYTHON_IMAGE}" "${REVISION}" "${CREATED}" > /opt/trtwarm/labels
LABEL org.opencontainers.image.title="trtwarm-init-pull" \
      org.opencontainers.image.description="trtwarm init for pull-only consumers (no CUDA, TensorRT or onnxruntime)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/trtwarm/trtwarm"
USER ${TRTWARM_UID}:${TRTWARM_GID}
WORKDIR /home/trtwarm
ENTRYPOINT ["trtwarm-init"]

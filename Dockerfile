# trtwarm init / sidecar image.
# The init image's TensorRT must equal the inference server's TensorRT exactly (engines are version-locked):
# build FROM the same base as your inference server, or install trtwarm into the inference image itself.
ARG BASE=python:3.12-slim
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=0 PIP_NO_CACHE_DIR=1
WORKDIR /opt/trtwarm
COPY pyproject.toml README.md ./
COPY trtwarm ./trtwarm
COPY cmd ./cmd
# add ".[tensorrt]" for the TensorRT builder (needs a CUDA base image and the matching driver)
RUN pip install . && python -m compileall -q /usr/local/lib && install -m 0755 cmd/trtwarm-init /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["trtwarm-init"]

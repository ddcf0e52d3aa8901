"""Builders: turn a model and a build configuration into an engine in a staging directory.

:mod:`~trtwarm.builders.base` holds the interface and the registry (a builder's name is its module's name);
:mod:`~trtwarm.builders.command` runs any command (``trtexec``, a script); :mod:`~trtwarm.builders.onnxruntime`
writes ONNX Runtime's optimised model (and the TensorRT EP's EPContext model); :mod:`~trtwarm.builders.tensorrt`
drives the TensorRT API. Each is imported only when chosen, so a hit never imports a heavy library.
"""

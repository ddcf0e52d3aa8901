"""The TensorRT builder, split by what needs TensorRT to run.

:mod:`~trtwarm.builders.tensorrt.builder` (the :class:`Builder`: key sections, build, load check),
:mod:`~trtwarm.builders.tensorrt.network` (parse, configure, serialize: the calls into ``tensorrt``),
:mod:`~trtwarm.builders.tensorrt.compat` (pure facts: plan headers, flags by name, logger verdicts; tested
everywhere) and :mod:`~trtwarm.builders.tensorrt.timing_cache` (the shared timing-cache file on the volume).
"""

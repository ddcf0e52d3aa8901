"""The TensorRT builder, split by what needs TensorRT to run.

:mod:`~trtwarm.builders.tensorrt.builder` (the :class:`Builder`: key sections, build, load check),
:mod:`~trtwarm.builders.tensorrt.network` (parse, configure, serialize: the calls into ``tensorrt``),
:mod:`~trtwarm.builders.tensorrt.compat` (pure facts: plan headers, flags by name, logger verdicts; tested
everywhere), :mod:`~trtwarm.builders.tensorrt.timing_cache` (the shared timing-cache file on the volume),
:mod:`~trtwarm.builders.tensorrt.library` (which ``libnvinfer`` a process loads, its version and the CUDA it links),
:mod:`~trtwarm.builders.tensorrt.cudamajor` (the CUDA major of the installed TensorRT) and
:mod:`~trtwarm.builders.tensorrt.elf` (what a shared object says about itself, read without loading it).
"""

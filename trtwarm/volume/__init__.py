"""The shared cache volume: where things live, how they get there, and who may touch them.

:mod:`~trtwarm.volume.layout` (the on-volume tree, a public contract), :mod:`~trtwarm.volume.store` (verified lookup
and the one atomic publish), :mod:`~trtwarm.volume.lock` (the per-key build lock and its owner record),
:mod:`~trtwarm.volume.leases` (in-use leases that keep gc away) and :mod:`~trtwarm.volume.statcache` (memoised model
facts, so a repeat start hashes nothing). Imports only the base modules (errors, config, fsutil, model, key).
"""

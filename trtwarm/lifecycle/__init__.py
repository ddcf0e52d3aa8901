"""The lifecycle commands an operator runs against a volume: ``ls``, ``stats``, ``verify``, ``gc``, ``rm``, ``explain``.

:mod:`~trtwarm.lifecycle.inventory` scans the volume read-only; :mod:`~trtwarm.lifecycle.gc` plans and executes
removal; :mod:`~trtwarm.lifecycle.verify` re-hashes entries; :mod:`~trtwarm.lifecycle.explain` diffs a key against
the entries on the volume; :mod:`~trtwarm.lifecycle.tables` renders; :mod:`~trtwarm.lifecycle.commands` wires them
to the CLI. Inspect, plan, execute: nothing here changes the volume without a plan that ``--dry-run`` prints.
"""

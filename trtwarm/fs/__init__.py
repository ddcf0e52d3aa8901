"""Filesystem primitives every layer shares: the atomic replace (stage, fsync, rename once), bounded reads,
hashing, and what a ``stat`` or an ``errno`` says. Imports nothing of trtwarm but itself.
"""

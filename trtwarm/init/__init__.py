"""The ``trtwarm init`` algorithm: plan the key, hit, wait, build and publish under the lock, hand the engine
over; the repeat hit (``fasthit``) and its record; signal handling. Nothing here parses a command line.
"""

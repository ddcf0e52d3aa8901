"""Signed manifests and the trust policy: who may have built an entry that this Pod hands over.

``keys`` (Ed25519 or ECDSA key files and key ids), ``envelope`` (the in-toto Statement of a manifest in a DSSE envelope:
sign and verify), ``policy`` (trusted keys scoped to models or key prefixes, mode ``enforce|warn|off``, and the gate
the init and ``trtwarm verify`` call). Imports only the base modules and :mod:`trtwarm.volume`.
"""

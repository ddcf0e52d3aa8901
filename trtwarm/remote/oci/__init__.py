"""The engine repository in an OCI registry (``--remote oci://REGISTRY/REPOSITORY``; ``pip install 'trtwarm[oci]'``).

``url`` (the URL, plain-HTTP policy and transfer settings), ``auth`` (Docker/Podman auth files, Basic and bearer
challenges), ``client`` (a thin registry client on :mod:`trtwarm.transport`, which owns every bound, cap, retry and
credential-per-origin rule: typed errors, the path interface the shared pull and push use), ``layout`` (the public media types and the manifest shape, checked), ``repo`` (refs as
tagged manifests, first-writer-wins by read-back), ``image`` (engine *images* for Kubernetes image volumes).
Contract: docs/oci.md. Imports only base modules, :mod:`trtwarm.remote` and :mod:`trtwarm.volume`.
"""

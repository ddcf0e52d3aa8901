"""The sidecar beside the inference server: ``/metrics``, ``/healthz``, ``/readyz``, lease refresh, periodic gc.

:mod:`~trtwarm.sidecar.server` (the HTTP server and the loops) and :mod:`~trtwarm.sidecar.metrics` (a scrape-time
collector over the hand-off and a background volume scan, in a private registry).
"""

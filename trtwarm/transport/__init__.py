"""The transport contract: every request trtwarm makes to a peer over the network (an S3 store through obstore, a
registry and its token service, anything else) is bounded, capped and stoppable here, and nowhere else
(``tests/test_transport_contract.py`` fails when another module imports an HTTP or object-store client).

``limits`` (the settings and caps: one frozen object, the same ``TRTWARM_REMOTE_*`` meaning for every backend),
``stop`` (SIGTERM/SIGINT end every wait in every thread), ``breaker`` (the process's memory of a dead peer),
``waits`` (what is being waited for, transfer progress), ``wire`` (watched sockets: connect, headers, idle, rate
floor, deadlines), ``origin`` (credentials are bound to scheme, host and port), ``retry`` (which requests are tried
again, and how long a pause may be), ``answer`` (every body read under a cap, JSON strictly), ``http`` (the HTTP
client: pool, retries, redirects, credentials per origin), ``listing`` (pages, key order, token chains), ``gate``
(the in-process proxy obstore talks through, which applies the same contract to every S3 request and answer;
``tunnel`` carries a ``CONNECT``), ``s3`` and ``s3errors`` (obstore under the
contract, its failures typed). Imports only
base modules (:mod:`trtwarm.errors`, :mod:`trtwarm.config`, :mod:`trtwarm.strictjson`). Contract for users:
docs/remote.md, "The transport contract".
"""

"""The central engine repository on S3-compatible object storage (``pip install 'trtwarm[s3]'``).

``url`` (``s3://bucket/prefix`` and the AWS settings), ``client`` (the S3 layout's paths on the transport's obstore,
typed errors; every bound, cap and retry is :mod:`trtwarm.transport`'s), ``repo`` (blobs and refs, create-only
refs), ``pull`` (parallel ranged GETs, hashed while streaming), ``push`` (HEAD, multipart, ref last), ``sync`` (the
init path's pull and push policy), ``gc`` and ``coverage`` (the operator's commands), ``commands`` (their CLI
wiring). Imports only base modules, :mod:`trtwarm.transport` and :mod:`trtwarm.volume`.
"""

"""The central engine repository on S3-compatible object storage (``pip install 'trtwarm[s3]'``).

``url`` (``s3://bucket/prefix`` and the AWS settings), ``client`` (obstore: timeouts, retries, typed errors),
``repo`` (blobs and refs, create-only refs), ``pull`` (parallel ranged GETs, hashed while streaming), ``push``
(HEAD, multipart, ref last), ``sync`` (the init path's pull and push policy), ``gc`` and ``coverage`` (the
operator's commands), ``commands`` (their CLI wiring). Imports only base modules and :mod:`trtwarm.volume`.
"""

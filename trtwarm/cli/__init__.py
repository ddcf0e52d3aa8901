"""The command line: argument parsing, the process entry point, and each command's front end (``remote``,
``batch``, ``prebuild``, ``selftest``, ``demo``), help, completion and the mapping of failures to output.
"""

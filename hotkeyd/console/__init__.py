"""What an operator sees: the views and probes behind ``hotkeyd top``, ``watch`` and ``check``.

Plain functions and small classes over the client-side readers, so each is tested
without the CLI; :mod:`hotkeyd.cli` only parses options and prints what they return.
"""

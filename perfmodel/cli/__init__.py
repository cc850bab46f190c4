"""The ``perfmodel`` command: :mod:`perfmodel.cli.main` (the parser and ``main``, the console
script's entry point) and one module per sub-command group (``sla``, ``compare``,
``simulate``, ``factors``, ``collect``) with its arguments and its command function.

The top layer: it may import every other layer; nothing in the package imports it.
"""

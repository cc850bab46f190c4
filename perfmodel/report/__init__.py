"""Report layer: paper I/O (numbers, tables, figures, notebook dependencies) and the
pipeline's output bookkeeping.

Kept free of numpy: ``python3 -m perfmodel.report.paperio deps ...`` and
``python3 -m perfmodel.report.pipeline ...`` run with the standard library alone.
"""

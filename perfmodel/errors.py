"""Exceptions raised by perfmodel.

Every public function checks its input first and raises :class:`InputError`
(a :class:`ValueError`) with one message that names the problem: the column,
the first offending rows and how many, or the argument and its value. The
command-line interface turns it into a one-line message and exit status 2.
"""
from __future__ import annotations


class PerfmodelError(Exception):
    """Base class of every error perfmodel raises on purpose."""


class InputError(PerfmodelError, ValueError):
    """Bad input: a missing column, an invalid value, a wrong argument."""


class DataUnavailableError(PerfmodelError, RuntimeError):
    """A public dataset cannot be reached: no mirror, no cache and no network."""


class ChecksumError(PerfmodelError, RuntimeError):
    """A dataset file does not have the sha256 its registry entry pins."""


class FitError(PerfmodelError, RuntimeError):
    """The optimiser could not produce a usable fit."""

"""Residual-diagnostic plots: each takes a matplotlib ``ax`` and returns it.

Problem: the residual tests of :mod:`perfmodel.stats.diagnostics` give one number
each; the plots show *where* a fit goes wrong (tails, a fan-shaped spread
against S, drift over time, periodic correlation). Every function draws on the
``ax`` it is given (a new figure when ``ax`` is None), sets labels, and returns
the ``ax``; nothing is shown or saved here, so notebooks and scripts compose
figures freely (ax in, ax out).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from perfmodel._checks import check_vector
from perfmodel.errors import InputError

__all__ = ["acf_plot", "get_ax", "log_axis_ticks", "qq_plot", "residuals_vs"]


def get_ax(ax, needs: str = "plot"):
    """Return ``ax``, or a new Axes when None; refuse objects without ``needs``.

    The one place the ax-in / ax-out figure functions of every module get
    their Axes from.
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots()
    elif not hasattr(ax, needs):
        raise InputError(f"`ax` must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax


def qq_plot(resid: Any, ax=None, *, standardize: bool = True):
    """Normal QQ plot of residuals with its reference line.

    Points on the line mean normal residuals; an S shape means heavy tails,
    a bow means skew. This is the plot to read beside Shapiro-Wilk when n is
    large and the test rejects for small departures. For standardised
    residuals the reference is ``y = x`` (a standard normal sample lies on it);
    for raw residuals it is the line through the quartiles (scale unknown).

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure's axes when None.
    standardize : bool, default True
        Plot (e - mean) / sd instead of e, against ``y = x``.

    Returns
    -------
    matplotlib.axes.Axes
    """
    e = check_vector("`resid`", resid, min_n=3, nonconstant=True)
    ax = get_ax(ax)
    if standardize:
        e = (e - e.mean()) / e.std(ddof=1)
    osm, osr = stats.probplot(e, dist="norm", fit=False)
    ax.plot(osm, osr, ".", ms=3, alpha=0.6, label="residuals")
    lo, hi = osm[0], osm[-1]
    if standardize:
        ax.plot([lo, hi], [lo, hi], "-", lw=1, color="C3", label="y = x (normal)")
    else:
        q1, q3 = np.percentile(e, [25, 75])
        z1, z3 = stats.norm.ppf([0.25, 0.75])
        slope = (q3 - q1) / (z3 - z1)
        ax.plot([lo, hi], [q1 + slope * (lo - z1), q1 + slope * (hi - z1)], "-", lw=1,
                color="C3", label="quartile line")
    ax.set_xlabel("normal quantile")
    ax.set_ylabel("standardised residual" if standardize else "residual")
    ax.set_title("Normal QQ plot")
    return ax


def _plain_number(v: float) -> str:
    """A tick value in plain digits: ``f"{v:.6g}"`` with a short exponent (``1e-15``, ``1e6``)."""
    text = f"{v:.6g}"
    mant, sep, exp = text.partition("e")
    return f"{mant}e{int(exp)}" if sep else text


def log_axis_ticks(ax, axis: str = "y", *, base: int = 10, steps=None, every: int = 1):
    """Label a logarithmic axis in plain numbers (no exponents), at chosen steps.

    Matplotlib labels a log axis only at powers of ten written as
    ``$10^{k}$`` (and a base-2 axis as ``$2^{k}$``), so an axis spanning less
    than a decade (e.g. errors from 3 to 60 %) gets one label or none, and
    the exponents print at 0.7 times the tick label size (see
    :func:`perfmodel.report.paperio.printed_font_pt`).  This puts labelled
    ticks at ``s * base**k`` for each ``s`` in ``steps`` inside the current
    limits, written as plain numbers (``0.5``, ``20``, ``128``, and
    ``1e-15`` beyond six digits), and no minor labels.  Call it after the
    data are drawn (it reads the current limits).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Axes whose ``axis`` is logarithmic.
    axis : {"x", "y"}
        Which axis.
    base : {10, 2}, default 10
        Ticks at multiples of powers of ``base``.
    steps : sequence of float, optional
        Multipliers ``s`` (each ``1 <= s < base``) of each power.  Default
        ``(1, 2, 5)`` for base 10 (the 1-2-5 ticks) and ``(1,)`` for base 2
        (powers of two); ``(1,)`` with base 10 labels decades only.
    every : int, default 1
        Label only the powers ``base**k`` with ``k`` a multiple of ``every``
        (e.g. ``every=3`` with ``steps=(1,)``: 1e-6, 0.001, 1, 1000 on an
        axis spanning many decades); the skipped powers get unlabelled minor
        ticks.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    perfmodel.errors.InputError
        For an ``axis`` other than ``"x"``/``"y"``, a ``base`` other than 10
        or 2, ``steps`` outside ``[1, base)``, an ``every`` that is not a
        positive integer, or an axis without positive finite limits.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    if axis not in ("x", "y"):
        raise InputError(f"`axis` must be 'x' or 'y', got {axis!r}")
    if isinstance(base, bool) or base not in (10, 2):
        raise InputError(f"`base` must be 10 or 2, got {base!r}")
    if steps is None:
        steps = (1.0, 2.0, 5.0) if base == 10 else (1.0,)
    try:
        mult = np.asarray(steps, dtype=float).ravel()
    except (TypeError, ValueError):
        raise InputError(f"`steps` must be numbers in [1, {base}), got {steps!r}") from None
    if mult.size == 0 or not np.all((mult >= 1.0) & (mult < base)):
        raise InputError(f"`steps` must be numbers in [1, {base}), got {steps!r}")
    if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
        raise InputError(f"`every` must be a positive integer, got {every!r}")
    ax = get_ax(ax, needs="get_ylim")
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi):
        raise InputError(f"the {axis} axis needs positive finite limits, got ({lo}, {hi})")
    logb = np.log(base)
    k = np.arange(np.floor(np.log(lo) / logb) - 1, np.ceil(np.log(hi) / logb) + 1)
    powers = float(base) ** k
    ticks = np.unique(mult[:, None] * powers[k % every == 0])
    ticks = ticks[(ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: _plain_number(v)))
    if every > 1:
        skipped = powers[k % every != 0]
        target.set_minor_locator(FixedLocator(skipped[(skipped >= lo) & (skipped <= hi)]))
    target.set_minor_formatter(NullFormatter())
    return ax


def residuals_vs(x: Any, resid: Any, ax=None, xlabel: str = "x", *, bins: int = 20):
    """Residuals against one variable (fitted value, B, S, context, time).

    A flat band around zero is what a good fit gives; a trend means missing
    structure in that variable (e.g. a context term), a fan means variance
    growing with it (heteroscedasticity). A line of binned medians (``bins``
    equal-count bins of ``x``) helps read dense clouds.

    Parameters
    ----------
    x : array_like, shape (n,)
        The variable on the horizontal axis.
    resid : array_like, shape (n,)
        Residuals, same length as ``x``.
    ax : matplotlib.axes.Axes, optional
    xlabel : str, default "x"
        Horizontal axis label, e.g. ``"S (tokens)"``.
    bins : int, default 20
        Number of equal-count bins for the median line; 0 draws none.

    Returns
    -------
    matplotlib.axes.Axes
    """
    e = check_vector("`resid`", resid, min_n=2, nonconstant=True)
    xv = check_vector("`x`", x, n=e.size)
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 0:
        raise InputError(f"`bins` must be a non-negative integer, got {bins!r}")
    ax = get_ax(ax)
    ax.plot(xv, e, ".", ms=3, alpha=0.5, label="residuals")
    ax.axhline(0.0, color="k", lw=0.8)
    if bins and e.size >= 2 * bins:
        order = np.argsort(xv, kind="stable")
        groups = np.array_split(order, bins)
        ax.plot([np.median(xv[g]) for g in groups], [np.median(e[g]) for g in groups],
                "-o", ms=3, color="C3", lw=1.2, label="binned median")
    ax.set_xlabel(str(xlabel))
    ax.set_ylabel("residual")
    return ax


def acf_plot(resid: Any, ax=None, lags: int = 40):
    """Autocorrelation function of time-ordered residuals, with 95% bands.

    Bars outside the shaded band (Bartlett's formula) are autocorrelations
    unlikely under independence; Durbin-Watson tests lag 1, Ljung-Box lags
    1..L together.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals in time order.
    ax : matplotlib.axes.Axes, optional
    lags : int, default 40
        Largest lag drawn, 1 <= lags < n (reduced to n - 1 if larger).

    Returns
    -------
    matplotlib.axes.Axes
    """
    e = check_vector("`resid`", resid, min_n=3, nonconstant=True)
    if isinstance(lags, bool) or not isinstance(lags, (int, np.integer)) or lags < 1:
        raise InputError(f"`lags` must be a positive integer, got {lags!r}")
    lags = int(min(lags, e.size - 1))
    ax = get_ax(ax)
    from statsmodels.graphics.tsaplots import plot_acf

    plot_acf(e, ax=ax, lags=lags, zero=False, title="Residual autocorrelation")
    ax.set_xlabel("lag (steps)")
    ax.set_ylabel("autocorrelation")
    return ax

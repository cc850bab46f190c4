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


def log_axis_ticks(ax, axis: str = "y"):
    """Label a logarithmic axis at 1-2-5 steps in plain numbers.

    Matplotlib labels a log axis only at powers of ten, so an axis spanning
    less than a decade (e.g. errors from 3 to 60 %) gets one label or none.
    This puts labelled ticks at 1, 2, 5 x 10^k inside the current limits (and
    no minor labels). Call it after the data are drawn.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Axes whose ``axis`` is logarithmic.
    axis : {"x", "y"}
        Which axis.

    Returns
    -------
    matplotlib.axes.Axes
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    if axis not in ("x", "y"):
        raise InputError(f"`axis` must be 'x' or 'y', got {axis!r}")
    ax = get_ax(ax, needs="get_ylim")
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi):
        raise InputError(f"the {axis} axis needs positive finite limits, got ({lo}, {hi})")
    k = np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
    ticks = np.sort((np.array([1.0, 2.0, 5.0])[:, None] * 10.0 ** k).ravel())
    ticks = ticks[(ticks >= lo) & (ticks <= hi)]
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
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

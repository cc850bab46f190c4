"""Interpolated lookup tables over a layer-profile bundle's measured grids.

Problem
-------
A profile bundle (:func:`perfmodel.data.datasets.llmservingsim.load_profile_bundle`)
measures kernels on grids: dense layers by token count, ``lm_head`` /
``sampler`` by number of sequences, MoE blocks by (tokens, activated
experts) and attention on a 4-D grid (prefill chunk ``p``, its KV context
``kp``, number of decodes ``n``, their KV context ``kd``).  A step of a real
engine falls between grid points, so every table must be interpolated, over
many steps at once (:mod:`perfmodel.core.compose` composes 10^5 steps in
seconds).

Interpolation (the one rule, every table)
-----------------------------------------
*Piecewise-linear in the axis value and in time*, axis by axis
(multilinear).  Kernel times on these grids are close to affine in each axis
between neighbouring grid points (KV length and decode count add memory
traffic linearly; tokens add work linearly once the GPU is saturated), and
linear-in-value interpolation is exact for an affine function, whereas
log-log interpolation is not.  Below an axis's smallest measured value the
query is clamped to it (a one-token chunk costs what the smallest profiled
chunk costs: the kernel's fixed cost dominates there).  Above the largest
value the two topmost grid points are extended linearly (the upstream
simulator does the same, output-bundle documentation of LLMServingSim:
"extrapolating from the top two samples"); results are floored at the
smallest measured time of the table, so an extrapolation can never go
negative.

The attention grid is not rectangular: the published bundles hold the union
of a doubling grid (16, 32, ... 2048 / 16 ... 16384) and a x1.5 grid
(24, 36, ... / 512, 768, ...), mixed batches have up to 128 decodes while
pure-decode batches go to 256, and ``kp`` is meaningless without a prefill
chunk (``kd`` without decodes).  :class:`AttentionGrid` therefore first fills a
dense array over the union of the axis values: ``kp`` is broadcast over the
``p = 0`` slice and ``kd`` over the ``n = 0`` slice (they do not exist there),
then the missing cells are filled by the same 1-D rule along ``kd``, ``kp``,
``n`` and ``p`` in turn, first only between known values of a line (repeated
until nothing more can be filled so), then also beyond them; mixed batches
with more than 128 decodes are thus linear extrapolations in ``n`` from the
64- and 128-decode rows.  Queries are then multilinear on that dense array.

Verified against: grid points held out of the table before it is built
(``tests/core/test_compose.py``: median and 95th-percentile relative error
of the held-out attention and dense points).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.errors import InputError

__all__ = ["AttentionGrid", "MoeTable", "Table1D", "bracket", "interp1"]


def bracket(x: np.ndarray, axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left index ``i`` and weight ``w`` with ``x ~ (1-w) axis[i] + w axis[i+1]``.

    Clamped below (``w = 0`` at the first point), linearly extended above
    (``w > 1`` on the last interval).  ``axis`` is sorted, with >= 2 values.
    """
    x = np.maximum(np.asarray(x, float), axis[0])
    i = np.minimum(np.searchsorted(axis, x, side="right") - 1, axis.size - 2)
    lo = axis[i]
    w = (x - lo) / (axis[i + 1] - lo)
    return i, w


def interp1(xq, x, y) -> np.ndarray:
    """Piecewise-linear ``y(xq)``; clamped below ``x[0]``, extended linearly above ``x[-1]``."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if x.size == 1:
        return np.full(np.shape(xq), y[0])
    i, w = bracket(xq, x)
    return y[i] + w * (y[i + 1] - y[i])


def _fill_line(line: np.ndarray, axis: np.ndarray, outside: bool) -> bool:
    """Fill the NaNs of one 1-D line in place from its known values; True if any changed.

    ``outside=False`` fills only between the first and last known value.
    """
    known = ~np.isnan(line)
    if known.all() or known.sum() < 2:
        return False
    miss = ~known
    if not outside:
        k = np.nonzero(known)[0]
        miss &= (np.arange(line.size) > k[0]) & (np.arange(line.size) < k[-1])
        if not miss.any():
            return False
    line[miss] = interp1(axis[miss], axis[known], line[known])
    return True


def _fill_axis(g: np.ndarray, axis: np.ndarray, dim: int, outside: bool) -> bool:
    """Fill along dimension ``dim`` of ``g`` every line that has >= 2 known values."""
    moved = np.moveaxis(g, dim, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    todo = np.nonzero(np.isnan(flat).any(axis=1) & (np.sum(~np.isnan(flat), axis=1) >= 2))[0]
    changed = False
    for r in todo:
        changed |= _fill_line(flat[r], axis, outside)
    g[...] = np.moveaxis(flat.reshape(moved.shape), -1, dim)
    return changed


class Table1D:
    """Several curves ``time_us(x)`` on their own axes (dense layers by tokens, ...)."""

    def __init__(self, df: pd.DataFrame, key: str, x: str, what: str):
        self.curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, g in df.groupby(key, sort=True):
            g = g.groupby(x, sort=True)["time_us"].mean()
            if g.size < 1:
                continue
            self.curves[str(name)] = (g.index.to_numpy(float), g.to_numpy(float))
        if not self.curves:
            raise InputError(f"{what}: no rows")

    def __contains__(self, name: str) -> bool:
        return name in self.curves

    def __call__(self, name: str, xq) -> np.ndarray:
        x, y = self.curves[name]
        return np.maximum(interp1(xq, x, y), y.min())


class AttentionGrid:
    """The 4-D attention table ``time_us(p, kp, n, kd)``, filled dense (module docstring)."""

    COLS = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode")

    def __init__(self, df: pd.DataFrame):
        d = df.groupby(list(self.COLS), sort=True)["time_us"].mean().reset_index()
        if d.empty:
            raise InputError("attention grid: no rows")
        self.axes = [np.unique(d[c].to_numpy(float)) for c in self.COLS]
        for c, a in zip(self.COLS, self.axes):
            if a.size < 2:
                raise InputError(f"attention grid: axis {c} has {a.size} value(s), needs >= 2")
        idx = [np.searchsorted(a, d[c].to_numpy(float)) for c, a in zip(self.COLS, self.axes)]
        g = np.full([a.size for a in self.axes], np.nan)
        g[tuple(idx)] = d["time_us"].to_numpy(float)
        self._broadcast_irrelevant(g)
        for outside in (False, True):  # interpolate wherever possible before extrapolating
            for _ in range(8):
                if not np.isnan(g).any():
                    break
                changed = [_fill_axis(g, self.axes[k], k, outside) for k in (3, 1, 2, 0)]
                if not any(changed):
                    break
        if np.isnan(g).any():
            raise InputError(f"attention grid: {int(np.isnan(g).sum())} cells cannot be filled "
                             "from the measured points")
        self.floor = float(d["time_us"].min())
        self.grid = g
        self._flat = g.ravel()
        self._strides = np.array(g.strides) // g.itemsize
        self._bits = np.array([[(c >> k) & 1 for c in range(16)] for k in range(4)], bool)
        self._offsets = (self._bits * self._strides[:, None]).sum(axis=0)

    def _broadcast_irrelevant(self, g: np.ndarray) -> None:
        """kp does not exist without a prefill chunk, kd not without decodes."""
        p, kp, n, kd = self.axes
        if p[0] == 0 and kp[0] == 0:
            g[0] = np.where(np.isnan(g[0]), g[0, :1], g[0])
        if n[0] == 0 and kd[0] == 0:
            g[:, :, 0] = np.where(np.isnan(g[:, :, 0]), g[:, :, 0, :1], g[:, :, 0])
        if p[0] == 0 and n[0] == 0:
            g[0, :, 0, :] = np.nanmin(g)  # the empty batch: never queried, keeps fills finite

    def __call__(self, p, kp, n, kd) -> np.ndarray:
        """Attention time (us) of batches with one prefill chunk of ``p`` tokens on ``kp``
        cached ones and ``n`` decodes on ``kd`` cached tokens each (arrays broadcast).

        ``p = 0`` means no prefill chunk, ``n = 0`` no decodes; a chunk or context
        below the smallest profiled non-zero value is clamped up to it.
        """
        q = [np.asarray(v, float) for v in np.broadcast_arrays(p, kp, n, kd)]
        for k in (0, 3):  # p and kd: 0 means absent; else clamp up to the first non-zero
            pos = self.axes[k][self.axes[k] > 0]
            q[k] = np.where(q[k] > 0, np.maximum(q[k], pos[0]), 0.0)
        q[3] = np.where(q[2] > 0, q[3], 0.0)
        q[1] = np.where(q[0] > 0, q[1], 0.0)
        shape = q[0].shape
        base = np.zeros(q[0].size, np.intp)
        wt = np.ones((q[0].size, 16))
        for k, (v, a) in enumerate(zip(q, self.axes)):
            i, w = bracket(v.ravel(), a)
            base += i * self._strides[k]
            bit = self._bits[k]  # the corners that take the upper point on axis k
            wt *= np.where(bit, w[:, None], 1.0 - w[:, None])
        vals = self._flat[base[:, None] + self._offsets]
        return np.maximum(np.sum(wt * vals, axis=1), self.floor).reshape(shape)


class MoeTable:
    """``time_us(tokens, activated_experts)`` of one MoE block on one rank, filled dense.

    Cells with more activated experts than were profiled at that token count
    (e.g. 128 experts at 8 tokens, impossible with top-8 routing) hold the
    largest profiled value of their row; queries never reach them when the
    activated-expert count is computed from the token count.
    """

    def __init__(self, df: pd.DataFrame):
        d = df.groupby(["tokens", "activated_experts"])["time_us"].mean().unstack()
        if d.shape[0] < 2 or d.shape[1] < 1:
            raise InputError("moe table: needs >= 2 token counts")
        self.tokens = d.index.to_numpy(float)
        self.experts = d.columns.to_numpy(float)
        g = d.to_numpy(float, copy=True)
        for r in range(g.shape[0]):
            known = ~np.isnan(g[r])
            if not known.any():
                raise InputError(f"moe table: no time at tokens={self.tokens[r]:g}")
            last = np.nonzero(known)[0]
            g[r] = np.where(known, g[r], np.interp(self.experts, self.experts[last], g[r][last]))
        self.grid = g
        self.floor = float(np.nanmin(g))

    def __call__(self, tokens, experts) -> np.ndarray:
        it, wt = bracket(tokens, self.tokens)
        if self.experts.size == 1:
            col = self.grid[:, 0]
            return np.maximum(col[it] + wt * (col[it + 1] - col[it]), self.floor)
        ie, we = bracket(experts, self.experts)
        we = np.minimum(we, 1.0)  # never beyond all experts
        g = self.grid
        v0 = g[it, ie] + we * (g[it, ie + 1] - g[it, ie])
        v1 = g[it + 1, ie] + we * (g[it + 1, ie + 1] - g[it + 1, ie])
        return np.maximum(v0 + wt * (v1 - v0), self.floor)

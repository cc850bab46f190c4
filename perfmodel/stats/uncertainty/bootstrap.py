"""The bootstrap of a fit (:func:`bootstrap` -> :class:`BootstrapResult`): resampling
schemes, parallel refits, percentile/BCa/studentized intervals.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from numbers import Integral, Real
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._parallel import check_backend, map_tasks, task_seed, task_seeds
from perfmodel.core import fit as _fitmod
from perfmodel.core.scale import get_scale, scale_of
from perfmodel.errors import FitError, InputError
from perfmodel.stats.uncertainty._common import (
    BLOCKS,
    COV_TYPES,
    METHODS,
    SCHEMES,
    SE_TYPES,
    WILD_WEIGHTS,
    _alpha_problem,
    _check_fit,
    _choice_problem,
    _fit_data,
    _fit_groups,
    _free_mask,
    _int_problem,
    _leverage,
    _raise,
)
from perfmodel.stats.uncertainty.covariance import sandwich_cov
from perfmodel.stats.uncertainty.resampling import (
    bca_interval,
    block_indices,
    optimal_block_length,
    percentile_interval,
    quantile_mc_range,
    studentized_interval,
)

# ---------------------------------------------------------------------------
# the bootstrap
# ---------------------------------------------------------------------------

@dataclass
class BootstrapResult:
    """Bootstrap distribution and intervals of a fit's parameters.

    ``samples`` holds the ``n_boot - n_failed`` successful resample fits
    (rows in resample order); ``failures`` lists ``(resample index, reason)``
    for every failed one: none is dropped silently.  ``to_dict()`` is
    JSON-safe and carries the keys ``FitResult.fit_report`` prints
    (scheme, n_boot, n_failed, method, param_names, lower, upper).
    """

    param_names: list[str]
    estimate: np.ndarray
    samples: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    scheme: str
    n_boot: int
    n_failed: int
    failures: list[tuple[int, str]]
    alpha: float
    seed: int
    relative: str
    loss: str
    block: str | None = None
    block_length: float | None = None
    block_length_rule: str | None = None
    wild_weights: str | None = None
    z0: np.ndarray | None = None
    acceleration: np.ndarray | None = None
    jackknife: dict | None = None
    notes: list[str] = field(default_factory=list)
    se_type: str | None = None
    se_hat: np.ndarray | None = None
    se_samples: np.ndarray | None = None

    @property
    def n_ok(self) -> int:
        return int(self.samples.shape[0])

    @property
    def stderr(self) -> np.ndarray:
        """Bootstrap standard errors (sd of the samples, ddof=1)."""
        if self.n_ok < 2:
            return np.full(len(self.param_names), np.nan)
        return self.samples.std(axis=0, ddof=1)

    def intervals(self) -> pd.DataFrame:
        """The intervals as a DataFrame (estimate, stderr, lower, upper) by parameter."""
        df = pd.DataFrame({"estimate": self.estimate, "stderr": self.stderr,
                           "lower": self.lower, "upper": self.upper},
                          index=pd.Index(list(self.param_names), name="parameter"))
        df.attrs.update(method=f"bootstrap-{self.scheme}-{self.method}", n_ok=self.n_ok,
                        n_failed=self.n_failed)
        return df

    def endpoint_mc_range(self, level: float = 0.95) -> pd.DataFrame:
        """Monte Carlo range of each percentile endpoint, from the resamples themselves.

        The ``q``-quantile of ``n`` resamples is the order statistic near
        ``q n``; another set of ``n`` resamples would give one within about
        ``q n +- z sqrt(n q (1-q))`` (the binomial count of resamples below
        the true quantile), ``z`` from ``level``
        (:func:`~perfmodel.stats.uncertainty.resampling.quantile_mc_range`).  Returns, per parameter,
        ``lower_lo, lower_hi, upper_lo, upper_hi``: the values of those
        bracketing order statistics for the ``alpha/2`` and ``1 - alpha/2``
        quantiles (for BCa intervals the nominal quantiles, an approximation).
        A wide range means the endpoint is set by a few extreme resamples
        and is not determined by ``n_boot`` of them.
        """
        if not 0 < level < 1:
            raise InputError(f"level must be in (0, 1), got {level!r}")
        out = {}
        for name, q in (("lower", self.alpha / 2), ("upper", 1 - self.alpha / 2)):
            if self.n_ok:
                lo, hi = quantile_mc_range(self.samples, q, level)
            else:
                lo = hi = np.full(len(self.param_names), np.nan)
            out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
        return pd.DataFrame(out, index=pd.Index(list(self.param_names), name="parameter"))

    def undetermined(self, max_spread: float = 0.5, max_ratio: float = 2.0,
                     level: float = 0.95) -> pd.DataFrame:
        """Endpoints that the resamples do not determine (booleans ``lower``, ``upper``).

        An endpoint is undetermined when its Monte Carlo range
        (:meth:`endpoint_mc_range`) is both wider than ``max_spread`` times the
        interval (``upper - lower``: another ``n_boot`` resamples could move it
        by more than half the interval) and spans more than a factor
        ``max_ratio`` in magnitude (or crosses zero): the endpoint is then a
        few extreme resamples -- often fits that wandered along a flat
        direction, whose values move with the BLAS kernel -- and is reported
        as not determined rather than as a number.  For normal samples and
        ``n_boot = 199`` the range is about 0.3 of the interval and a factor
        of about 1.2; on the Splitwise llama2-70b/h100/tp4 group the upper end
        of ``k_B`` spans 7.2 to 463 (flagged) while that of ``tau_B`` spans
        0.16 to 0.22 (kept).  An endpoint whose range is wider than the
        endpoint itself is undetermined too (not even its magnitude is known).
        A parameter whose resamples all sit at a bound has zero width and zero
        spread (determined).
        """
        for name, v in (("max_spread", max_spread), ("max_ratio", max_ratio)):
            if not (np.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a positive number, got {v!r}")
        r = self.endpoint_mc_range(level)
        ends = {"lower": np.asarray(self.lower, float), "upper": np.asarray(self.upper, float)}
        width = ends["upper"] - ends["lower"]
        flags = {}
        for name in ("lower", "upper"):
            lo, hi = r[f"{name}_lo"].to_numpy(float), r[f"{name}_hi"].to_numpy(float)
            small = np.minimum(np.abs(lo), np.abs(hi))
            big = np.maximum(np.abs(lo), np.abs(hi))
            mag = np.abs(ends[name])
            with np.errstate(invalid="ignore"):
                wide = ~((hi - lo) <= max_spread * width)
                spans = (np.sign(lo) * np.sign(hi) < 0) | ~(big <= max_ratio * small)
                vague = (mag > 0) & ((hi - lo) > mag)
            flags[name] = (wide & spans) | vague
        return pd.DataFrame(flags, index=r.index)

    def to_dict(self, include_samples: bool = False) -> dict[str, Any]:
        """JSON-safe dict (NaN/inf -> None), for FIT.json's ``'bootstrap'`` key."""
        def fl(v):
            return None if v is None or not np.isfinite(v) else float(v)

        def vec(a):
            return None if a is None else [fl(v) for v in np.asarray(a, float)]

        d = {
            "scheme": self.scheme, "n_boot": int(self.n_boot), "n_failed": int(self.n_failed),
            "method": self.method, "param_names": list(self.param_names),
            "lower": vec(self.lower), "upper": vec(self.upper),
            "estimate": vec(self.estimate), "stderr": vec(self.stderr),
            "alpha": float(self.alpha), "seed": int(self.seed), "n_ok": self.n_ok,
            "relative": self.relative, "loss": self.loss,
            "block": self.block, "block_length": fl(self.block_length),
            "block_length_rule": self.block_length_rule, "wild_weights": self.wild_weights,
            "z0": vec(self.z0), "acceleration": vec(self.acceleration),
            "jackknife": self.jackknife, "se_type": self.se_type, "se_hat": vec(self.se_hat),
            "failures": [[int(b), str(r)] for b, r in self.failures],
            "notes": list(self.notes),
        }
        if include_samples:
            d["samples"] = [[fl(v) for v in row] for row in self.samples]
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> BootstrapResult:
        """Rebuild from :meth:`to_dict` output (samples only if it has them)."""
        need = ("scheme", "n_boot", "n_failed", "method", "param_names", "lower", "upper")
        missing = [k for k in need if k not in d]
        if missing:
            raise InputError(f"BootstrapResult.from_dict: missing keys {missing}")

        def arr(v):
            return None if v is None else np.array([np.nan if x is None else x for x in v], float)

        p = len(d["param_names"])
        samples = np.array([[np.nan if x is None else x for x in r] for r in d["samples"]],
                           float).reshape(-1, p) if d.get("samples") else np.zeros((0, p))
        return cls(param_names=list(d["param_names"]),
                   estimate=arr(d.get("estimate")) if d.get("estimate") else np.full(p, np.nan),
                   samples=samples, lower=arr(d["lower"]), upper=arr(d["upper"]),
                   method=d["method"], scheme=d["scheme"], n_boot=int(d["n_boot"]),
                   n_failed=int(d["n_failed"]),
                   failures=[(int(b), str(r)) for b, r in d.get("failures", [])],
                   alpha=float(d.get("alpha", 0.05)), seed=int(d.get("seed", 0)),
                   relative=d.get("relative", "log"), loss=d.get("loss", "linear"),
                   block=d.get("block"), block_length=d.get("block_length"),
                   block_length_rule=d.get("block_length_rule"),
                   wild_weights=d.get("wild_weights"), z0=arr(d.get("z0")),
                   acceleration=arr(d.get("acceleration")), jackknife=d.get("jackknife"),
                   notes=list(d.get("notes", [])), se_type=d.get("se_type"),
                   se_hat=arr(d.get("se_hat")))


@dataclass
class _Job:
    """Everything a worker needs to draw and fit resamples (picklable)."""

    model: str
    feats: dict
    y: np.ndarray
    mu: np.ndarray
    resid: np.ndarray        # fit-scale residuals, leverage-adjusted (wild) / centred (residual)
    relative: str
    loss: str
    f_scale: float | None
    scale: bool
    x0: np.ndarray
    scheme: str
    block: str
    block_length: float | None
    wild_weights: str
    weights: np.ndarray | None
    se_type: str | None = None
    clusters: list | None = None  # row indices of each cluster (scheme 'cluster')


def _draw(job: _Job, rng):
    n = job.y.size
    if job.scheme in ("pairs", "block", "cluster"):
        if job.scheme == "pairs":
            idx = rng.integers(0, n, n)
        elif job.scheme == "cluster":
            pick = rng.integers(0, len(job.clusters), len(job.clusters))
            idx = np.concatenate([job.clusters[c] for c in pick])
        else:
            idx = block_indices(n, job.block_length, block=job.block, rng=rng)
        feats = {k: v[idx] for k, v in job.feats.items()}
        w = None if job.weights is None else job.weights[idx]
        return feats, job.y[idx], w
    if job.scheme == "residual":
        e = job.resid[rng.integers(0, n, n)]
    else:  # wild
        if job.wild_weights == "rademacher":
            v = rng.choice(np.array([-1.0, 1.0]), n)
        else:  # Mammen's two-point distribution: mean 0, variance 1, third moment 1
            s5 = math.sqrt(5.0)
            v = np.where(rng.random(n) < (s5 + 1) / (2 * s5), -(s5 - 1) / 2, (s5 + 1) / 2)
        e = job.resid * v
    return job.feats, get_scale(job.relative).inverse(job.mu, e), job.weights


def _refit(job: _Job, feats, y, w):
    """One warm-started single-start fit; returns the values or raises."""
    kw = {}
    if job.loss in ("huber", "soft_l1", "cauchy", "tukey") and job.f_scale:
        kw["f_scale"] = job.f_scale
    # Warm start from the full-data optimum, with a fixed unit x_scale: the features are
    # median-scaled, so the parameters are O(1), and a Jacobian-based scale blows up along
    # directions the resample cannot resolve (e.g. k_B once every batch has saturated),
    # where trf then crawls to max_nfev (seen on the vLLM-CPU traces: 170 of 200 block
    # resamples; with x_scale=1 every one converged in 12-120 evaluations).
    r = _fitmod.fit_model(feats, job.model, y=y, x0=job.x0, n_starts=1, relative=job.relative,
                          loss=job.loss, scale=job.scale, weights=w,
                          x_scale=1.0 if job.scale else "jac", **kw)
    if not r.success:
        raise FitError(f"optimiser did not converge: {r.message}")
    v = np.asarray(r.values, float)
    if not np.all(np.isfinite(v)):
        raise FitError("non-finite parameter values")
    return v, r


def _se(se_type, model, theta, feats, y, relative, fixed_names, classical=None):
    """Standard errors of ``theta`` of type ``se_type`` on the data (feats, y)."""
    if se_type == "classical":
        return np.asarray(classical, float)
    free = np.array([n not in fixed_names for n in model.param_names])
    se = np.full(free.size, np.nan)
    if free.any():
        scale = get_scale(relative)
        mu = model.predict(theta, feats)
        J = scale.jacobian(model.jacobian(theta, feats), mu, y)
        cov = sandwich_cov(J[:, free], scale.residual(y, mu), se_type)
        d = np.diag(cov)
        se[free] = np.where(d > 0, np.sqrt(np.abs(d)), np.nan)
    return se


def _boot_task(job: _Job, item):
    b, ss = item
    rng = np.random.default_rng(ss)
    try:
        feats, y, w = _draw(job, rng)
        if not np.all(np.isfinite(y) & (y > 0)):
            bad = int(np.sum(~(np.isfinite(y) & (y > 0))))
            raise InputError(f"resampled step times have {bad} non-positive or non-finite values")
        v, r = _refit(job, feats, y, w)
        if job.se_type is None:
            return b, v, None
        se = _se(job.se_type, r.model, v, feats, y, job.relative,
                 set(r.at_bound) | set(r.unidentified), r.stderr)
        return b, np.concatenate([v, se]), None
    except (FitError, InputError, ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
        return b, None, f"{type(exc).__name__}: {exc}"


def _jack_task(job: _Job, item):
    g, leave = item
    keep = np.ones(job.y.size, bool)
    keep[leave] = False
    feats = {k: v[keep] for k, v in job.feats.items()}
    w = None if job.weights is None else job.weights[keep]
    try:
        return g, _refit(job, feats, job.y[keep], w)[0], None
    except (FitError, InputError, ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
        return g, None, f"{type(exc).__name__}: {exc}"


def _parallel(func, items, n_jobs, progress, desc, *, backend="loky", scheduler=None,
              total=None):
    """Run ``func`` on every item (:func:`perfmodel._parallel.map_tasks`); results in item order."""
    return map_tasks(func, items, backend=backend, n_jobs=n_jobs, scheduler=scheduler,
                     total=total, progress=progress, desc=desc)


def _bootstrap_arg_problems(*, n_boot, scheme, method, alpha, block, block_length, wild_weights,
                            seed, n_jobs, jackknife_groups, se_type, backend="loky",
                            scheduler=None, groups=None) -> list[str]:
    """Every problem with the arguments of :func:`bootstrap` (one message lists them all)."""
    problems = (_int_problem("n_boot", n_boot, 2) + _choice_problem("scheme", scheme, SCHEMES)
                + _choice_problem("method", method, METHODS) + _alpha_problem(alpha)
                + _choice_problem("block", block, BLOCKS)
                + _choice_problem("wild_weights", wild_weights, WILD_WEIGHTS)
                + _int_problem("seed", seed, 0) + _int_problem("jackknife_groups", jackknife_groups, 2))
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or n_jobs == 0:
        problems.append(f"n_jobs must be a non-zero integer (joblib convention), got {n_jobs!r}")
    try:
        check_backend(backend, scheduler)
    except InputError as e:
        problems.append(str(e))
    if block_length is not None and (isinstance(block_length, bool) or
                                     not isinstance(block_length, Real) or block_length < 1):
        problems.append(f"block_length must be None or a number >= 1, got {block_length!r}")
    if se_type is not None:
        problems += _choice_problem("se_type", se_type, COV_TYPES)
        if method != "studentized":
            problems.append(f"se_type is only used by method 'studentized', got method {method!r}")
    if block_length is not None and scheme != "block":
        problems.append(f"block_length is only used by scheme 'block', got scheme {scheme!r}")
    if (groups is None) != (scheme != "cluster"):
        problems.append("groups is required by scheme 'cluster' and used by no other scheme")
    if scheme == "cluster" and method == "studentized":
        problems.append("method 'studentized' is not available with scheme 'cluster'")
    return problems


def _bootstrap_job(fit, feats, yy, w, *, scheme, method, block, block_length, wild_weights,
                   se_type, notes: list[str], codes=None):
    """The resampling scheme's setup -> (job, block length, its rule); appends notes."""
    n = yy.size
    model = fit.model
    theta = np.asarray(fit.values, float)
    mu = model.predict(theta, feats)
    e = scale_of(fit).residual(yy, mu)
    resid = e
    if scheme in ("residual", "wild"):
        free = _free_mask(fit)
        Jf = scale_of(fit).jacobian(model.jacobian(theta, feats), mu, yy)[:, free]
        h = _leverage(Jf) if free.any() else np.zeros(n)
        resid = e / np.sqrt(1.0 - h)
        if scheme == "residual":
            resid = resid - resid.mean()
        notes.append("residuals on the fit's scale divided by sqrt(1 - h_ii)"
                     + (" and centred" if scheme == "residual" else ""))
    L, rule = None, None
    if scheme == "block":
        if block_length is None:
            L, rule = optimal_block_length(e, block)
        else:
            L, rule = float(block_length), "given"
        if L > n:
            raise InputError(f"bootstrap: block_length {L} exceeds the {n} steps")
    job = _Job(model=fit.fitted_model_name, feats=feats, y=yy, mu=mu, resid=resid,
               relative=fit.options.get("relative", "log"), loss=fit.options.get("loss", "linear"),
               f_scale=fit.options.get("f_scale"), scale=fit.options.get("scale", True),
               x0=theta, scheme=scheme, block=block, block_length=L,
               wild_weights=wild_weights, weights=w,
               se_type=(se_type or SE_TYPES[scheme]) if method == "studentized" else None,
               clusters=None if codes is None else
               [np.flatnonzero(codes == c) for c in range(int(codes.max()) + 1)])
    if codes is not None:
        notes.append(f"whole clusters resampled: {len(job.clusters)} clusters of "
                     f"{n / len(job.clusters):.3g} steps on average")
    return job, L, rule


def _resample_fits(job: _Job, fit, seed, n_boot, *, n_jobs, progress, notes: list[str],
                   backend="loky", scheduler=None):
    """The resample fits, in parallel -> (samples, se_samples, se_hat, failures); appends notes.

    Resample ``b`` draws from :func:`perfmodel._parallel.task_seed` ``(seed, b)``, generated
    lazily (a huge ``n_boot`` allocates nothing up front).
    """
    res = _parallel(partial(_boot_task, job), task_seeds(seed, n_boot), n_jobs, progress,
                    f"bootstrap ({job.scheme})", backend=backend, scheduler=scheduler,
                    total=n_boot)
    ok = [v for _, v, _ in res if v is not None]
    failures = [(b, r) for b, v, r in res if v is None]
    del res
    if not ok:
        raise FitError(f"bootstrap: all {n_boot} resample fits failed; first reasons: "
                       f"{[r for _, r in failures[:3]]}")
    samples = np.vstack(ok)
    se_samples = se_hat = None
    theta = job.x0
    p = theta.size
    if job.se_type is not None:
        samples, se_samples = samples[:, :p], samples[:, p:]
        se_hat = _se(job.se_type, fit.model, theta, job.feats, job.y, job.relative,
                     set(fit.at_bound) | set(getattr(fit, "unidentified", [])), fit.stderr)
    if failures:
        notes.append(f"{len(failures)} of {n_boot} resample fits failed; intervals use the "
                     f"{samples.shape[0]} others")
    return samples, se_samples, se_hat, failures


def _bca_with_jackknife(job: _Job, fit, samples, *, alpha, jackknife_groups, stream, n_jobs,
                        progress, notes: list[str], backend="loky", scheduler=None):
    """BCa interval, its acceleration from a (grouped) jackknife -> (lo, hi, z0, acc, jinfo)."""
    theta, n, scheme = job.x0, job.y.size, job.scheme
    z0 = acc = None
    rng = np.random.default_rng(stream)
    if scheme == "cluster":
        G = len(job.clusters)
        sets = np.array_split(rng.permutation(G), min(G, jackknife_groups))
        groups = [np.concatenate([job.clusters[c] for c in cs]) for cs in sets]
        kind = ("leave-one-cluster-out jackknife" if G <= jackknife_groups else
                f"grouped jackknife, {jackknife_groups} random sets of whole clusters")
    elif n <= jackknife_groups:
        groups = [np.array([i]) for i in range(n)]
        kind = "leave-one-out"
    else:
        order = np.arange(n) if scheme == "block" else rng.permutation(n)
        groups = np.array_split(order, jackknife_groups)
        kind = (f"grouped (delete-d) jackknife, {jackknife_groups} "
                f"{'contiguous' if scheme == 'block' else 'random'} groups of ~{n // jackknife_groups}")
    jres = _parallel(partial(_jack_task, job), list(enumerate(groups)), n_jobs, progress,
                     "jackknife", backend=backend, scheduler=scheduler)
    jk = [v for _, v, _ in jres if v is not None]
    jfail = [(g, r) for g, v, r in jres if v is None]
    jinfo = {"kind": kind, "n_groups": len(groups), "n_failed": len(jfail),
             "failures": [[int(g), str(r)] for g, r in jfail[:20]]}
    if len(jk) < 3:
        lo = hi = np.full(theta.size, np.nan)
        notes.append("BCa: fewer than 3 jackknife fits succeeded; no interval")
    else:
        lo, hi, z0, acc = bca_interval(theta, samples, np.vstack(jk), alpha)
        if np.any(~np.isfinite(z0)):
            notes.append("BCa: every sample on one side of the estimate for "
                         f"{[n_ for n_, z in zip(fit.param_names, z0) if not np.isfinite(z)]}; "
                         "no interval there")
    return lo, hi, z0, acc, jinfo


def _studentized(fit, theta, se_hat, samples, se_samples, alpha, notes: list[str]):
    """Bootstrap-t interval clipped to the parameter box; appends notes."""
    model = fit.model
    lo, hi, used = studentized_interval(theta, se_hat, samples, se_samples, alpha)
    # bootstrap-t intervals do not respect the parameter box; the truth lies in it
    lo, hi = np.maximum(lo, model.lower), np.minimum(hi, model.upper)
    if np.any(used < samples.shape[0]):
        notes.append("studentized: resamples without a finite standard error left out: "
                     + ", ".join(f"{n_}: {samples.shape[0] - u}"
                                 for n_, u in zip(fit.param_names, used)
                                 if u < samples.shape[0]))
    return lo, hi


def bootstrap(fit, data=None, n_boot: int = 1000, *, y=None, scheme: str = "pairs",
              method: str = "percentile", alpha: float = 0.05, block: str = "stationary",
              block_length: float | None = None, wild_weights: str = "rademacher",
              seed: int = 0, n_jobs: int = 1, progress: bool = False,
              jackknife_groups: int = 100, se_type: str | None = None,
              weights=None, backend: str = "loky",
              scheduler: str | None = None, groups=None) -> BootstrapResult:
    """Bootstrap intervals for a fit's parameters.

    Problem: covariance intervals rest on a linearisation and on iid errors
    of one variance; the bootstrap refits the model to ``n_boot`` resampled
    data sets and reads the intervals off the refits' distribution.

    Schemes (all on the fit's scale; see the module docstring):

    ``'pairs'``
        Rows (steps) drawn with replacement.  Valid under heteroscedasticity
        and model misspecification; needs independent steps.
    ``'residual'``
        Fixed design; ``y* = rebuild(mu, e*)`` with ``e*`` drawn with
        replacement from the leverage-adjusted, centred residuals
        ``e_i / sqrt(1 - h_ii)`` (Davison & Hinkley 1997, alg. 6.3).
        Assumes iid errors on the fit's scale.
    ``'wild'``
        Fixed design; ``e*_i = v_i e_i / sqrt(1 - h_ii)`` with Rademacher
        weights ``v_i = +/-1`` (default; Davidson & Flachaire 2008) or
        Mammen's two-point weights.  Valid under heteroscedastic errors.
    ``'block'``
        Rows drawn in blocks of consecutive steps (``'stationary'``:
        geometric lengths; ``'circular'``: fixed length), keeping the time
        dependence inside blocks: for autocorrelated traces.  Rows must be
        in time order (a DataFrame is sorted by ``step``/``timestamp``).
        ``block_length=None`` takes the data-driven Politis-White length of
        the fit-scale residuals (:func:`optimal_block_length`; via ``arch``).
    ``'cluster'``
        Whole clusters (``groups``: configurations, replicate sets, time
        blocks) drawn with replacement, all their rows together (the cluster
        or "case-cluster" bootstrap; Cameron, Gelbach & Miller, Rev. Econ.
        Stat. 90, 2008; Field & Welsh, JASA 102, 2007).  Valid when residuals
        correlate within a cluster and clusters are independent; BCa's
        jackknife then deletes whole clusters.

    Methods: ``'percentile'``; ``'studentized'`` (bootstrap-t,
    :func:`studentized_interval`: each resample studentized by its own
    standard error of type ``se_type``, default by scheme :data:`SE_TYPES` --
    HC3 for pairs and wild, classical for residual, HAC for block); or
    ``'bca'`` (bias-corrected and accelerated, :func:`bca_interval`); BCa's acceleration comes from a jackknife of the
    rows: leave-one-out when ``n <= jackknife_groups``, else a grouped
    (delete-d) jackknife with ``jackknife_groups`` groups (random groups;
    contiguous ones for the block scheme) -- a subsample of the jackknife
    that keeps its cost fixed.

    Every resample is fitted by :func:`perfmodel.core.fit.fit_model` with the
    fit's options (relative, loss and its ``f_scale``, scale), one start,
    warm-started from the full-data estimate.  A resample whose fit raises
    or does not converge is counted in ``n_failed`` and listed with its
    reason in ``failures``; intervals use the successful ones.

    Parameters
    ----------
    fit : FitResult
    data : None (the rows the fit carries), a step-trace DataFrame or a
        feature dict (then ``y`` is required)
    n_boot : number of resamples
    scheme, method, block, block_length, wild_weights : see above
    alpha : 1 - confidence level
    seed : resample ``b`` draws from the stream
        ``numpy.random.SeedSequence(seed).spawn(n_boot + 1)[b]``
        (:func:`perfmodel._parallel.task_seed`, generated lazily: a huge
        ``n_boot`` allocates nothing up front), the BCa jackknife from the
        last one; results do not depend on ``n_jobs`` or ``backend``
    n_jobs : joblib workers (1 with backend 'loky': in-process, no joblib)
    backend : 'loky' (local cores) or 'dask' (a Dask distributed cluster,
        :func:`perfmodel._parallel.map_tasks`)::

            boot = bootstrap(fit, n_boot=10_000, backend="dask",
                             scheduler="tcp://host:8786")

    scheduler : 'dask' only: the scheduler address; None starts a LocalCluster
        of processes on this machine for the call
    progress : show a tqdm progress bar on standard error (off when it is not a terminal)
    jackknife_groups : number of jackknife groups for BCa
    se_type : 'classical', 'HC0', 'HC3' or 'HAC': the standard error of the
        studentized method (default :data:`SE_TYPES` of the scheme)
    weights : sample weights of the original fit (FitResult does not store
        them), resampled with the rows
    groups : scheme ``'cluster'`` only: a column name of the trace ``data``
        or one cluster label per row of ``data`` (of the fit's own rows when
        ``data`` is None), e.g. :func:`perfmodel.stats.validation.fold_groups`

    Returns
    -------
    BootstrapResult

    Examples
    --------
    >>> from perfmodel.core.synthetic import simulate_trace          # doctest: +SKIP
    >>> from perfmodel.core.fit import fit_model                     # doctest: +SKIP
    >>> fit = fit_model(simulate_trace(n=500, noise='multiplicative'))  # doctest: +SKIP
    >>> bootstrap(fit, n_boot=199, scheme='pairs').intervals()  # doctest: +SKIP
    """
    _check_fit(fit, "bootstrap")
    _raise(_bootstrap_arg_problems(
        n_boot=n_boot, scheme=scheme, method=method, alpha=alpha, block=block,
        block_length=block_length, wild_weights=wild_weights, seed=seed, n_jobs=n_jobs,
        jackknife_groups=jackknife_groups, se_type=se_type, backend=backend,
        scheduler=scheduler, groups=groups), "bootstrap")

    feats, yy = _fit_data(fit, data, y, "bootstrap")
    n = yy.size
    w = None
    if weights is not None:
        w = np.asarray(weights, float).ravel()
        if w.shape != (n,) or not np.all(np.isfinite(w) & (w >= 0)):
            raise InputError(f"bootstrap: weights must be {n} finite values >= 0, got shape {w.shape}")
    notes: list[str] = []
    codes = None if groups is None else _fit_groups(fit, data, groups, n, "bootstrap")
    job, L, rule = _bootstrap_job(fit, feats, yy, w, scheme=scheme, method=method, block=block,
                                  block_length=block_length, wild_weights=wild_weights,
                                  se_type=se_type, notes=notes, codes=codes)
    theta = job.x0
    samples, se_samples, se_hat, failures = _resample_fits(
        job, fit, seed, n_boot, n_jobs=n_jobs, progress=progress, notes=notes, backend=backend,
        scheduler=scheduler)
    z0 = acc = jinfo = None
    if method == "percentile":
        lo, hi = percentile_interval(samples, alpha)
    elif method == "studentized":
        lo, hi = _studentized(fit, theta, se_hat, samples, se_samples, alpha, notes)
    else:
        lo, hi, z0, acc, jinfo = _bca_with_jackknife(
            job, fit, samples, alpha=alpha, jackknife_groups=jackknife_groups,
            stream=task_seed(seed, n_boot), n_jobs=n_jobs, progress=progress, notes=notes,
            backend=backend, scheduler=scheduler)
    return BootstrapResult(param_names=list(fit.param_names), estimate=theta, samples=samples,
                           lower=np.asarray(lo, float), upper=np.asarray(hi, float), method=method,
                           scheme=scheme, n_boot=int(n_boot), n_failed=len(failures),
                           failures=failures, alpha=float(alpha), seed=int(seed),
                           relative=job.relative, loss=job.loss,
                           block=block if scheme == "block" else None,
                           block_length=L, block_length_rule=rule,
                           wild_weights=wild_weights if scheme == "wild" else None,
                           z0=z0, acceleration=acc, jackknife=jinfo, notes=notes,
                           se_type=job.se_type, se_hat=se_hat, se_samples=se_samples)

def attach_bootstrap(fit, boot: BootstrapResult):
    """Store ``boot.to_dict()`` in ``fit.provenance['bootstrap']`` (written to FIT.json,
    printed by ``fit_report``); returns ``fit``."""
    _check_fit(fit, "attach_bootstrap")
    if not isinstance(boot, BootstrapResult):
        raise InputError(f"attach_bootstrap: boot must be a BootstrapResult, got {type(boot).__name__}")
    if list(boot.param_names) != list(fit.param_names):
        raise InputError(f"attach_bootstrap: bootstrap parameters {boot.param_names} differ from "
                         f"the fit's {fit.param_names}")
    fit.provenance["bootstrap"] = boot.to_dict()
    return fit

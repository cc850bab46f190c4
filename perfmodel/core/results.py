"""FitResult: one object holding a fitted step-latency model and its quality.

Values, standard errors, covariance and correlation, parameters at a bound,
n, degrees of freedom, RSS, R^2, RMSE, MAE, MAPE, AIC/BIC, the optimiser's
status, an lmfit-like ``fit_report()``, a JSON-safe ``summary()``, a
``to_json`` / ``from_json`` round trip with provenance, and an HTML view for
notebooks.  Parameters the data cannot identify never get an interval.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel import __version__
from perfmodel._io import atomic_write_text
from perfmodel.core.fit_format import FIT_FORMAT_VERSION, check_fit_dict
from perfmodel.core.interval_calibration import KEY
from perfmodel.core.model import get_model
from perfmodel.errors import InputError

__all__ = ["FIT_FORMAT_VERSION", "FitData", "FitEstimate", "FitOptions", "FitResult",
           "atomic_write_text"]

CORR_WARN = 0.95


def _f(x):
    """JSON-safe float (None for NaN/inf)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _arr(a):
    return [[_f(v) for v in row] for row in np.asarray(a, float)]


def _unf(x):
    return float("nan") if x is None else float(x)


@dataclass(frozen=True)
class FitEstimate:
    """What the solver found, in physical units (one entry per fitted parameter)."""

    theta: np.ndarray
    cov: np.ndarray
    at_bound: np.ndarray          # bool per parameter
    unidentified: np.ndarray      # bool per parameter
    init: np.ndarray              # the start that won the multi-start race
    curve: Any                    # the final perfmodel.core.fit.CurveFit (scaled problem)


@dataclass(frozen=True)
class FitData:
    """The data of a fit: every row, which rows were fitted, and where they came from."""

    y: np.ndarray                 # measured, every row
    yhat: np.ndarray              # predicted, every row
    keep: np.ndarray              # bool per row: fitted (inside the outlier window)
    feats: dict                   # feature arrays, every row
    medians: dict                 # the feature medians the fit scaled by
    dropped: dict | None = None   # the outlier-window note
    trace_sha256: str | None = None


@dataclass(frozen=True)
class FitOptions:
    """How the fit was run; :meth:`as_dict` is ``FitResult.options``."""

    loss: str
    relative: str
    f_scale: float
    n_starts: int
    n_converged: int
    seed: int
    scale: bool
    outlier_window: Any = None
    irls_iterations: int = 0
    weighted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"loss": self.loss, "relative": self.relative, "f_scale": _f(self.f_scale),
                "n_starts": self.n_starts, "n_converged": self.n_converged, "seed": self.seed,
                "scale": self.scale,
                "outlier_window": list(self.outlier_window) if self.outlier_window else None,
                "irls_iterations": self.irls_iterations, "weighted": self.weighted}


@dataclass
class FitResult:
    """A fitted latency model (see module docstring)."""

    model_name: str
    fitted_model_name: str
    param_names: list[str]
    values: np.ndarray
    stderr: np.ndarray
    cov: np.ndarray
    init: np.ndarray
    at_bound: list[str]
    unidentified: list[str]
    n: int
    n_params: int
    dof: int
    rss: float
    rss_ms: float
    r2: float
    rmse: float
    mae: float
    mape: float
    aic: float
    bic: float
    success: bool
    status: int
    message: str
    nfev: int
    options: dict[str, Any]
    derived: dict[str, float] = field(default_factory=dict)
    derived_note: str = ""
    dropped: dict | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    medians: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: held-out interval calibration (perfmodel.core.interval_calibration), or None
    interval_calibration: dict | None = None
    # not serialised: arrays of the fitted data
    residuals: np.ndarray | None = field(default=None, repr=False)
    fitted: np.ndarray | None = field(default=None, repr=False)
    features: dict | None = field(default=None, repr=False)
    y: np.ndarray | None = field(default=None, repr=False)

    # ------------------------------------------------------------------
    @classmethod
    def build(cls, *, model, fitted, estimate: FitEstimate, data: FitData,
              options: FitOptions) -> FitResult:
        """The result of fitting member ``fitted`` (reported as ``model``)."""
        names = fitted.param_names
        theta, cov, curve = estimate.theta, estimate.cov, estimate.curve
        keep, feats = data.keep, data.feats
        every = bool(np.all(keep))  # no row left out: the columns are used as they are, not copied
        stderr = np.sqrt(np.clip(np.diag(cov), 0, None))
        stderr[~np.isfinite(np.diag(cov))] = np.nan
        yk, pk = (data.y, data.yhat) if every else (data.y[keep], data.yhat[keep])
        res = yk - pk
        n = int(yk.size)
        k = int(np.sum(~np.asarray(estimate.at_bound)))
        ss_tot = float(np.sum((yk - yk.mean()) ** 2))
        rss_ms = float(res @ res)
        rss_fit = float(curve.rss)
        ll_term = n * math.log(max(rss_fit, 1e-300) / n)
        derived, note = {}, ""
        if model.name != fitted.name and hasattr(model, "from_identifiable"):
            S = feats["S"][keep]
            p_max = float(np.clip(np.quantile(S / yk, 0.95), 1.0, 1e4))
            nat = model.from_identifiable(theta, p_max)
            derived = {nm: float(v) for nm, v in zip(model.param_names, nat)}
            note = (f"{', '.join(model.not_identifiable)} are not identifiable from step times "
                    f"(only w_0/P_max = a_0 and w_1/P_max = a_1 are); shown under the convention "
                    f"P_max = quantile(S/T, 0.95) = {p_max:.6g} tokens/ms, without intervals.")
        out = cls(
            model_name=model.name, fitted_model_name=fitted.name, param_names=list(names),
            values=np.asarray(theta, float), stderr=stderr, cov=np.asarray(cov, float),
            init=np.asarray(estimate.init, float),
            at_bound=[nm for nm, b in zip(names, estimate.at_bound) if b],
            unidentified=[nm for nm, b in zip(names, estimate.unidentified) if b],
            n=n, n_params=fitted.n_params, dof=int(curve.dof), rss=rss_fit, rss_ms=rss_ms,
            r2=1.0 - rss_ms / ss_tot if ss_tot > 0 else float("nan"),
            rmse=math.sqrt(rss_ms / n), mae=float(np.mean(np.abs(res))),
            mape=float(100 * np.mean(np.abs(res) / yk)),
            aic=ll_term + 2 * k, bic=ll_term + math.log(n) * k,
            success=bool(curve.success), status=int(curve.status), message=curve.message,
            nfev=int(curve.nfev),
            options=options.as_dict(),
            derived=derived, derived_note=note, dropped=data.dropped,
            provenance={"perfmodel_version": __version__, "trace_sha256": data.trace_sha256,
                            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")},
            medians={kk: float(v) for kk, v in data.medians.items()},
            residuals=res, fitted=pk, features={kk: v if every else v[keep] for kk, v in feats.items()}, y=yk,
        )
        out.warnings = out._make_warnings()
        return out

    # ------------------------------------------------------------------
    @property
    def model(self):
        return get_model(self.fitted_model_name)

    @property
    def params(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.param_names, self.values)}

    @property
    def stderrs(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.param_names, self.stderr)}

    @property
    def correlation(self) -> np.ndarray:
        d = np.sqrt(np.diag(self.cov))
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.cov / np.outer(d, d)

    def high_correlations(self, threshold: float = CORR_WARN) -> list[tuple[str, str, float]]:
        c = self.correlation
        out = []
        for i in range(len(self.param_names)):
            for j in range(i + 1, len(self.param_names)):
                if np.isfinite(c[i, j]) and abs(c[i, j]) > threshold:
                    out.append((self.param_names[i], self.param_names[j], float(c[i, j])))
        return sorted(out, key=lambda t: -abs(t[2]))

    def _make_warnings(self) -> list[str]:
        w = []
        for nm in self.at_bound:
            w.append(f"parameter {nm} is at a bound: no standard error; the optimum may lie outside the box")
        for nm in self.unidentified:
            w.append(f"parameter {nm} is not identified by these data (singular Jacobian direction)")
        for a, b, c in self.high_correlations():
            w.append(f"parameters {a} and {b} correlate at {c:+.3f} (> {CORR_WARN}): their separate "
                     "values are poorly determined")
        if not self.success:
            w.append(f"optimiser did not report success: {self.message}")
        return w

    def predict(self, data) -> np.ndarray:
        """Predicted step time (ms) for a step trace DataFrame or a features dict."""
        return self.model.predict(self.values, data)

    def conf_int(self, alpha: float = 0.05) -> dict[str, tuple[float, float]]:
        """t-based covariance intervals; NaN where no standard error exists."""
        from scipy import stats

        if not 0 < alpha < 1:
            raise InputError(f"alpha must be in (0, 1), got {alpha}")
        q = stats.t.ppf(1 - alpha / 2, max(self.dof, 1))
        return {n: (v - q * s, v + q * s) for n, v, s in zip(self.param_names, self.values, self.stderr)}

    # ------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """A JSON-safe dict of everything but the data arrays."""
        return {
            "format_version": FIT_FORMAT_VERSION,
            "model": self.model_name,
            "fitted_model": self.fitted_model_name,
            "formula": self.model.formula,
            "param_names": list(self.param_names),
            "units": [self.model.units()[n] for n in self.param_names],
            "values": [_f(v) for v in self.values],
            "stderr": [_f(v) for v in self.stderr],
            "init": [_f(v) for v in self.init],
            "cov": _arr(self.cov),
            "at_bound": list(self.at_bound),
            "unidentified": list(self.unidentified),
            "derived": {k: _f(v) for k, v in self.derived.items()},
            "derived_note": self.derived_note,
            "statistics": {k: _f(getattr(self, k)) if k not in ("n", "n_params", "dof") else int(getattr(self, k))
                           for k in ("n", "n_params", "dof", "rss", "rss_ms", "r2", "rmse", "mae", "mape",
                                     "aic", "bic")},
            "optimizer": {"success": self.success, "status": self.status, "message": self.message,
                          "nfev": self.nfev},
            "options": self.options,
            "dropped": self.dropped,
            "medians": self.medians,
            "provenance": self.provenance,
            "warnings": list(self.warnings),
            **({KEY: self.interval_calibration} if self.interval_calibration else {}),
        }

    def to_json(self, path=None, *, force: bool = False) -> str:
        """Serialise (and write atomically to ``path`` if given)."""
        text = json.dumps(self.summary(), indent=2, allow_nan=False)
        if path is not None:
            atomic_write_text(path, text + "\n", force=force)
        return text

    @classmethod
    def from_json(cls, source) -> FitResult:
        """Rebuild a FitResult from :meth:`to_json` output (a path, a JSON string or a dict).

        The document is checked against the FIT.json schema first
        (:func:`perfmodel.core.fit_format.check_fit_dict`: keys, types,
        lengths against the model, parameters finite and inside the model's
        bounds, ``format_version``); a file without ``format_version`` (written
        before the format was versioned) is read as version 1.
        """
        where = None
        if isinstance(source, dict):
            d = source
        else:
            text = str(source)
            p = Path(text) if len(text) < 4096 and not text.lstrip().startswith("{") else None
            if p is not None:
                where = str(p)
                if not p.exists():
                    raise InputError(f"fit file {p} does not exist")
                if not p.is_file():
                    raise InputError(f"fit file {p} is not a regular file")
                try:
                    text = p.read_text(encoding="utf-8")
                except UnicodeDecodeError as e:
                    raise InputError(f"fit file {p} is not UTF-8 text: {e.reason} at byte "
                                     f"{e.start}") from None
            try:
                d = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(f"fit file {where or ''} is not valid JSON: {e.msg} at line "
                                 f"{e.lineno}".replace("file  is", "file is")) from None
            except RecursionError:
                raise InputError(f"fit file {where or ''} is nested too deeply to be a fit") \
                    from None
        d = check_fit_dict(d, where)
        st = d["statistics"]
        out = cls(
            model_name=d["model"], fitted_model_name=d["fitted_model"],
            param_names=list(d["param_names"]),
            values=np.array([_unf(v) for v in d["values"]]),
            stderr=np.array([_unf(v) for v in d["stderr"]]),
            cov=np.array([[_unf(v) for v in row] for row in d["cov"]]),
            init=np.array([_unf(v) for v in d.get("init", [None] * len(d["values"]))]),
            at_bound=list(d.get("at_bound", [])), unidentified=list(d.get("unidentified", [])),
            n=int(st["n"]), n_params=int(st["n_params"]), dof=int(st["dof"]),
            rss=_unf(st["rss"]), rss_ms=_unf(st["rss_ms"]), r2=_unf(st["r2"]), rmse=_unf(st["rmse"]),
            mae=_unf(st["mae"]), mape=_unf(st["mape"]), aic=_unf(st["aic"]), bic=_unf(st["bic"]),
            success=bool(d["optimizer"]["success"]), status=int(d["optimizer"]["status"]),
            message=d["optimizer"]["message"], nfev=int(d["optimizer"]["nfev"]),
            options=dict(d.get("options", {})),
            derived={k: _unf(v) for k, v in d.get("derived", {}).items()},
            derived_note=d.get("derived_note", ""), dropped=d.get("dropped"),
            provenance=dict(d.get("provenance", {})), medians=dict(d.get("medians", {})),
            warnings=list(d.get("warnings", [])),
        )
        if d.get(KEY) is not None:  # its contents are checked where they are used
            out.interval_calibration = dict(d[KEY])
        if "bootstrap" in d:
            out.provenance["bootstrap"] = d["bootstrap"]
        return out

    # ------------------------------------------------------------------
    def fit_report(self, min_correl: float = 0.3) -> str:
        """An lmfit-like text report: fit statistics, variables, correlations."""
        units = self.model.units()
        L = []
        L.append("[[Model]]")
        L.append(f"    {self.model_name}" + (f" (fitted as {self.fitted_model_name})"
                                             if self.model_name != self.fitted_model_name else ""))
        L.append(f"    T = {self.model.formula}")
        L.append("[[Fit Statistics]]")
        o = self.options
        L.append(f"    loss                = {o.get('loss')} ({o.get('relative')} residuals)")
        L.append(f"    # function evals    = {self.nfev}")
        L.append(f"    # data points       = {self.n}")
        L.append(f"    # variables         = {self.n_params}")
        L.append(f"    degrees of freedom  = {self.dof}")
        L.append(f"    RSS (fit scale)     = {self.rss:.6g}")
        L.append(f"    R-squared           = {self.r2:.6f}")
        L.append(f"    RMSE                = {self.rmse:.6g} ms")
        L.append(f"    MAE                 = {self.mae:.6g} ms")
        L.append(f"    MAPE                = {self.mape:.4g} %")
        L.append(f"    Akaike info crit    = {self.aic:.6g}")
        L.append(f"    Bayesian info crit  = {self.bic:.6g}")
        L.append(f"    multi-start         = {o.get('n_converged')}/{o.get('n_starts')} starts converged "
                 f"(seed {o.get('seed')})")
        L.append(f"    optimiser           = {'success' if self.success else 'FAILED'}: {self.message}")
        if self.dropped:
            L.append(f"    outlier window      = {self.dropped['window_ms']} ms dropped "
                     f"{self.dropped['n_dropped']} steps")
        L.append("[[Variables]]")
        w = max(len(n) for n in self.param_names)
        for n, v, s, i in zip(self.param_names, self.values, self.stderr, self.init):
            if np.isfinite(s):
                pct = f" ({100 * s / abs(v):.2f}%)" if v != 0 else ""
                txt = f"{v:.8g} +/- {s:.4g}{pct}"
            elif n in self.at_bound:
                txt = f"{v:.8g} (at bound; no interval)"
            else:
                txt = f"{v:.8g} (not identified; no interval)"
            L.append(f"    {n:<{w}}: {txt} {units.get(n, '')} (init = {i:.6g})")
        if self.derived:
            L.append("[[Seed parameters (derived)]]")
            for n, v in self.derived.items():
                L.append(f"    {n:<{w}}: {v:.8g}")
            L.append(f"    note: {self.derived_note}")
        corr = [(a, b, c) for a, b, c in self.high_correlations(min_correl)]
        if corr:
            L.append(f"[[Correlations]] (unreported correlations are < {min_correl:.3f})")
            for a, b, c in corr:
                L.append(f"    C({a}, {b}) = {c:+.4f}")
        if self.warnings:
            L.append("[[Warnings]]")
            for x in self.warnings:
                L.append(f"    - {x}")
        bs = self.provenance.get("bootstrap")
        if bs:
            L.append(f"[[Bootstrap]] {bs.get('scheme')} x {bs.get('n_boot')} "
                     f"({bs.get('n_failed', 0)} failed), {bs.get('method', 'percentile')} intervals")
            for n, lo, hi in zip(bs["param_names"], bs["lower"], bs["upper"]):
                L.append(f"    {n:<{w}}: [{_unf(lo):.6g}, {_unf(hi):.6g}]")
        return "\n".join(L)

    def __str__(self) -> str:
        return self.fit_report()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{v:.6g}</td><td>{'' if not np.isfinite(s) else f'{s:.3g}'}</td>"
            f"<td>{html.escape(self.model.units().get(n, ''))}</td></tr>"
            for n, v, s in zip(self.param_names, self.values, self.stderr))
        warn = "".join(f"<li>{html.escape(x)}</li>" for x in self.warnings)
        return (f"<h4>perfmodel fit: {html.escape(self.model_name)}</h4>"
                f"<p>n = {self.n}, R<sup>2</sup> = {self.r2:.4f}, RMSE = {self.rmse:.4g} ms, "
                f"MAPE = {self.mape:.3g}%, AIC = {self.aic:.5g}</p>"
                f"<table><tr><th>parameter</th><th>value</th><th>std. error</th><th>unit</th></tr>"
                f"{rows}</table>" + (f"<ul>{warn}</ul>" if warn else ""))

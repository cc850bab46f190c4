"""Comparison models for step latency behind one fit/predict interface.

Problem: the saturation model (docs/model.md) must beat simpler or more flexible
models on the same data and the same validation splits to earn its
parameters. The alternatives are linear/polynomial regression and a
constant-throughput model (docs/model.md, Evaluation); DistServe's latency
model and a random forest (as in Vidur) are the peers.

Every baseline has ``name``, ``n_params`` (``None`` for the forest, which has
no fixed parameter count), ``fit(df) -> self`` and ``predict(df) -> ndarray``
(milliseconds), where ``df`` is a step trace (``batch_size``,
``total_tokens``, ``duration_ms`` for fitting; ``chunk_sizes`` and
``context_lens`` where a model needs them). ``__init__`` only stores its
arguments; ``fit`` validates, sets attributes ending in ``_`` and returns
``self`` (scikit-learn conventions). :func:`get_baseline` builds one by name.

``relative=True`` fits relative rather than absolute error, so long prefill
steps do not dominate the loss (docs/model.md, Fit scales): linear-in-parameter
models minimise sum ((T - T_hat) / T)^2 (weighted least squares with weights
1/T^2, which keeps the model's form); the random forest fits log T.

Per-request features come from :func:`_request_features`: the lists parsed
by :func:`perfmodel.data.trace.parse_list_column`, the features computed by the
package's kernel :func:`perfmodel.data.features.request_features` (with the decode
count and prefill tokens DistServe's form needs), checked with this module's
messages.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel._checks import rows_text
from perfmodel.core.scale import WEIGHT
from perfmodel.data.features import CONTEXT_KEYS, request_features, row_reduce
from perfmodel.data.trace import check_step_columns, parse_list_column
from perfmodel.errors import InputError

__all__ = [
    "BASELINES",
    "Baseline",
    "ConstantThroughput",
    "DistServe",
    "LinearBS",
    "Polynomial",
    "RandomForest",
    "get_baseline",
]

_B, _S, _T = "batch_size", "total_tokens", "duration_ms"
_CHUNKS, _CTX = "chunk_sizes", "context_lens"
#: the context features the baselines use: CONTEXT_KEYS without ``attn_prefill`` (the
#: baselines were defined before it; a new forest column would change their numbers)
_CONTEXT = tuple(k for k in CONTEXT_KEYS if k != "attn_prefill")


# ----------------------------------------------------------------------------
# per-request features
# ----------------------------------------------------------------------------
def _has_requests(df: pd.DataFrame) -> bool:
    return _CHUNKS in df.columns and _CTX in df.columns


def _request_features(df: pd.DataFrame, name: str = "df") -> dict[str, np.ndarray]:
    """Per-step features from the per-request ``chunk_sizes``/``context_lens``.

    The lists are parsed by :func:`perfmodel.data.trace.parse_list_column` and the
    features computed by :func:`perfmodel.data.features.request_features`.
    Returns float arrays :data:`_CONTEXT` (``ctx_sum``, ``ctx_max``, ``attn``,
    ``decode_ctx``, ``prefill_sq``, ``chunk_sd``) plus ``n_decode``
    (requests with c_i == 1) and ``s_prefill`` (tokens of requests with
    c_i > 1). A one-token prefill chunk counts as decode.
    """
    missing = [c for c in (_CHUNKS, _CTX) if c not in df.columns]
    if missing:
        raise InputError(f"`{name}` lacks column(s) {missing}, needed for per-request "
                         "features (';'-joined integers per step)")
    base = check_step_columns(df, need_y=False, name=name)
    n = len(df)
    keys = (*_CONTEXT, "n_decode", "s_prefill")
    out = {k: np.zeros(n) for k in keys}
    cl, xl = parse_list_column(df[_CHUNKS]), parse_list_column(df[_CTX])
    unparsable = ~(cl.ok & xl.ok)
    mismatch = ~unparsable & ((cl.counts != base["B"]) | (xl.counts != base["B"]))
    ok = ~unparsable & ~mismatch
    rows_ok = np.flatnonzero(ok)
    badval = np.zeros(n, bool)
    badsum = np.zeros(n, bool)
    if rows_ok.size:
        # the items of the rows that parsed with the right counts
        c = cl.flat[np.repeat(ok, cl.counts)].astype(float)
        x = xl.flat[np.repeat(ok, xl.counts)].astype(float)
        counts = cl.counts[ok]
        vals = request_features(c, x, counts, counts_keys=True)
        badval[rows_ok] = row_reduce(((c < 1) | (x < 0)).astype(float), counts, "sum") > 0
        badsum[rows_ok] = vals["S"] != base["S"][rows_ok]
        for k in keys:
            out[k][rows_ok] = vals[k]
    checks = (
        (unparsable, f"`{_CHUNKS}`/`{_CTX}` not ';'-joined integers"),
        (mismatch, f"`{_CHUNKS}` and `{_CTX}` must each list `{_B}` integers"),
        (badval, "chunk sizes must be >= 1 and context lengths >= 0"),
        (badsum, f"`{_CHUNKS}` must sum to `{_S}`"),
    )
    problems = [f"{what}: fails at {rows_text(mask, df.index)}"
                for mask, what in checks if mask.any()]
    if problems:
        raise InputError("; ".join(problems))
    return out


# ----------------------------------------------------------------------------
# least squares core
# ----------------------------------------------------------------------------
def _lstsq(X: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(Weighted) least squares with column scaling; returns coef and rank."""
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    Xs = X / scale
    if w is not None:
        sw = np.sqrt(w)
        Xs, y = Xs * sw[:, None], y * sw
    coef, _, rank, _ = np.linalg.lstsq(Xs, y, rcond=None)
    return coef / scale, int(rank)


def _not_fitted(obj) -> None:
    from sklearn.exceptions import NotFittedError

    raise NotFittedError(f"{type(obj).__name__} is not fitted: call fit(df) first")


class Baseline:
    """Common interface: ``name``, ``n_params``, ``fit(df)``, ``predict(df)``."""

    name: str = "baseline"
    relative: bool = False

    @property
    def n_params(self) -> int | None:
        """Number of fitted parameters (None when not a fixed number)."""
        return len(self._param_names)

    _param_names: tuple[str, ...] = ()

    def _check_relative(self) -> None:
        if not isinstance(self.relative, (bool, np.bool_)):
            raise InputError(f"`relative` must be True or False, got {self.relative!r}")

    def _weights(self, T: np.ndarray) -> np.ndarray | None:
        # relative error is the fit's 'weight' scale (perfmodel.core.scale): weights 1/T^2
        return WEIGHT.weights(T) if self.relative else None

    @property
    def params_(self) -> dict[str, float]:
        """Fitted coefficients by name."""
        if not hasattr(self, "coef_"):
            _not_fitted(self)
        return dict(zip(self._param_names, map(float, self.coef_)))

    def _design(self, df: pd.DataFrame, feats: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, df: pd.DataFrame) -> Baseline:
        """Fit on a step trace with ``duration_ms``; return self."""
        self._check_relative()
        feats = check_step_columns(df, need_y=True)
        X = self._design(df, feats)
        self.coef_, self.rank_ = _lstsq(X, feats["T"], self._weights(feats["T"]))
        self.n_train_ = len(df)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted step time (ms) for each row of ``df``."""
        if not hasattr(self, "coef_"):
            _not_fitted(self)
        feats = check_step_columns(df, need_y=False)
        return self._design(df, feats) @ self.coef_

    def __repr__(self) -> str:
        return f"{type(self).__name__}(relative={self.relative})"


class LinearBS(Baseline):
    """Linear regression T = a + b B + c S (the linear alternative).

    No saturation: the cost per token is the same at every batch size, so it
    cannot follow the falling per-token cost at small S; fitted by (weighted)
    least squares. ``params_``: ``a`` (ms), ``b`` (ms/request), ``c`` (ms/token).

    Verified: recovers exact coefficients from noise-free synthetic data and
    equals statsmodels OLS/WLS (tests).
    """

    name = "linear"
    _param_names = ("a", "b", "c")

    def __init__(self, relative: bool = False):
        self.relative = relative

    def _design(self, df, feats):
        return np.column_stack([np.ones_like(feats["B"]), feats["B"], feats["S"]])


class ConstantThroughput(Baseline):
    """Constant throughput T = a + S / P with P > 0 (the constant-throughput alternative).

    A fixed overhead ``a`` (ms) plus tokens at a fixed rate ``P`` (tokens/ms):
    no batch-size effect and no saturation. Fitted by bounded linear least
    squares on (a, 1/P) with 1/P >= 0 (:func:`scipy.optimize.lsq_linear`); if
    the data show no growth with S the fit puts 1/P = 0 and ``P_`` = inf.
    ``params_``: ``a``, ``inv_P`` (ms/token); ``P_`` is 1/inv_P.
    """

    name = "constant_throughput"
    _param_names = ("a", "inv_P")

    def __init__(self, relative: bool = False):
        self.relative = relative

    def _design(self, df, feats):
        return np.column_stack([np.ones_like(feats["S"]), feats["S"]])

    def fit(self, df: pd.DataFrame) -> ConstantThroughput:
        """Fit a and 1/P >= 0 by bounded least squares; return self."""
        from scipy.optimize import lsq_linear

        self._check_relative()
        feats = check_step_columns(df, need_y=True)
        X, y = self._design(df, feats), feats["T"]
        scale = np.abs(X).max(axis=0)
        w = self._weights(y)
        sw = np.ones_like(y) if w is None else np.sqrt(w)
        res = lsq_linear((X / scale) * sw[:, None], y * sw,
                         bounds=([-np.inf, 0.0], [np.inf, np.inf]), method="bvls")
        self.coef_ = res.x / scale
        self.rank_ = int(np.linalg.matrix_rank(X / scale))
        self.P_ = float(np.inf) if self.coef_[1] == 0 else float(1.0 / self.coef_[1])
        self.n_train_ = len(df)
        return self


class DistServe(Baseline):
    """DistServe's latency form, adapted to mixed (chunked-prefill) steps.

    DistServe models a prefill batch as a + b sum(l) + c sum(l^2) (l: prompt
    lengths) and a decode batch as a + b sum(context) + c B. A chunked-prefill
    step mixes both, so this baseline sums the two forms with one intercept::

        T = a + b * S_prefill + c * sum(l_i^2, prefill chunks)
              + d * sum(ctx_i, decode requests) + e * B_decode

    where a request with chunk c_i == 1 is a decode request (ctx_i its
    context), one with c_i > 1 a prefill chunk of length l_i = c_i.
    (DistServe did not chunk prefills: the prior context of a chunk is not
    in its form, and not here.) Needs ``chunk_sizes`` and ``context_lens``;
    without them ``fit``/``predict`` raise InputError (no silent fallback to
    B, S). Fitted by (weighted) least squares; a column that is zero in the
    training data (e.g. no prefill) gets coefficient 0 (minimum-norm
    solution) and ``rank_`` < 5 says so.
    """

    name = "distserve"
    _param_names = ("a", "b_prefill_tokens", "c_prefill_sq", "d_decode_ctx", "e_decode_reqs")

    def __init__(self, relative: bool = False):
        self.relative = relative

    def _design(self, df, feats):
        f = _request_features(df)
        return np.column_stack([np.ones(len(df)), f["s_prefill"], f["prefill_sq"],
                                f["decode_ctx"], f["n_decode"]])


class Polynomial(Baseline):
    """Polynomial regression of degree 2 or 3 in (B, S) (the polynomial alternative).

    All monomials B^i S^j with i + j <= degree (6 terms for degree 2, 10 for
    3) by scikit-learn ``PolynomialFeatures`` + ``LinearRegression``, after
    standardising B and S (the same function space, better conditioned).
    Flexible inside the data, poor outside it: the extrapolation split
    (:func:`perfmodel.stats.validation.extrapolation_split`) shows it.
    """

    def __init__(self, degree: int = 2, relative: bool = False):
        self.degree = degree
        self.relative = relative

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"poly{self.degree}"

    @property
    def n_params(self) -> int:
        return (self.degree + 1) * (self.degree + 2) // 2

    def fit(self, df: pd.DataFrame) -> Polynomial:
        """Fit the polynomial by (weighted) least squares; return self."""
        from sklearn.linear_model import LinearRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import PolynomialFeatures, StandardScaler

        if self.degree not in (2, 3) or isinstance(self.degree, bool):
            raise InputError(f"`degree` must be 2 or 3, got {self.degree!r}")
        self._check_relative()
        feats = check_step_columns(df, need_y=True)
        X = np.column_stack([feats["B"], feats["S"]])
        self.pipeline_ = make_pipeline(
            StandardScaler(), PolynomialFeatures(self.degree, include_bias=False),
            LinearRegression())
        w = self._weights(feats["T"])
        self.pipeline_.fit(X, feats["T"], linearregression__sample_weight=w)
        self.n_train_ = len(df)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted step time (ms)."""
        if not hasattr(self, "pipeline_"):
            _not_fitted(self)
        feats = check_step_columns(df, need_y=False)
        return self.pipeline_.predict(np.column_stack([feats["B"], feats["S"]]))

    def __repr__(self) -> str:
        return f"Polynomial(degree={self.degree}, relative={self.relative})"


class RandomForest(Baseline):
    """Random forest on B, S and, when present, per-request context features.

    The non-parametric peer (Vidur predicts operator times with random
    forests; the fixed-S analysis of docs/model.md, Secondary factors, gave
    R^2 = 0.43 with one):
    an upper reference for what the features can explain inside the data,
    with no extrapolation beyond them (a forest predicts a constant outside
    the training range). Features: B, S, plus ``ctx_sum``, ``ctx_max``,
    ``attn``, ``decode_ctx``, ``prefill_sq``, ``chunk_sd``, ``n_decode`` when
    the training trace has ``chunk_sizes`` and ``context_lens`` (``use_context``
    'auto'). ``relative=True`` fits log T. ``n_params`` is None.
    """

    name = "random_forest"
    _CTX_FEATURES = (*_CONTEXT, "n_decode")

    def __init__(self, n_estimators: int = 200, min_samples_leaf: int = 2,
                 max_features: float | str | None = 1.0, use_context: str | bool = "auto",
                 relative: bool = False, random_state: int = 0, n_jobs: int | None = 1):
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.use_context = use_context
        self.relative = relative
        self.random_state = random_state
        self.n_jobs = n_jobs

    @property
    def n_params(self) -> None:
        return None

    def _X(self, df, feats, use_ctx):
        cols = [feats["B"], feats["S"]]
        if use_ctx:
            f = _request_features(df)
            cols += [f[k] for k in self._CTX_FEATURES]
        return np.column_stack(cols)

    def fit(self, df: pd.DataFrame) -> RandomForest:
        """Fit the forest (seeded by ``random_state``); return self."""
        from sklearn.ensemble import RandomForestRegressor

        if self.use_context not in ("auto", True, False):
            raise InputError(f"`use_context` must be 'auto', True or False, "
                             f"got {self.use_context!r}")
        self._check_relative()
        feats = check_step_columns(df, need_y=True)
        use = _has_requests(df) if self.use_context == "auto" else bool(self.use_context)
        X = self._X(df, feats, use)
        y = np.log(feats["T"]) if self.relative else feats["T"]
        self.forest_ = RandomForestRegressor(
            n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
            max_features=self.max_features, random_state=self.random_state,
            n_jobs=self.n_jobs).fit(X, y)
        self.features_ = ("B", "S") + (self._CTX_FEATURES if use else ())
        self.n_train_ = len(df)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted step time (ms)."""
        if not hasattr(self, "forest_"):
            _not_fitted(self)
        feats = check_step_columns(df, need_y=False)
        X = self._X(df, feats, len(self.features_) > 2)
        p = self.forest_.predict(X)
        return np.exp(p) if self.relative else p

    @property
    def feature_importances_(self) -> dict[str, float]:
        """Impurity importances by feature name."""
        if not hasattr(self, "forest_"):
            _not_fitted(self)
        return dict(zip(self.features_, map(float, self.forest_.feature_importances_)))

    def __repr__(self) -> str:
        return (f"RandomForest(n_estimators={self.n_estimators}, "
                f"relative={self.relative}, random_state={self.random_state})")


#: name -> (class, default keyword arguments)
BASELINES: dict[str, tuple[type, dict]] = {
    "linear": (LinearBS, {}),
    "poly2": (Polynomial, {"degree": 2}),
    "poly3": (Polynomial, {"degree": 3}),
    "constant_throughput": (ConstantThroughput, {}),
    "distserve": (DistServe, {}),
    "random_forest": (RandomForest, {}),
}


def get_baseline(name: str, **kwargs) -> Baseline:
    """A new, unfitted baseline by registry name.

    Parameters
    ----------
    name : str
        One of ``BASELINES``: 'linear', 'poly2', 'poly3',
        'constant_throughput', 'distserve', 'random_forest'.
    **kwargs
        Passed to the class (e.g. ``relative=True``, ``random_state=1``),
        overriding the registry defaults.

    Examples
    --------
    >>> get_baseline("poly3", relative=True)
    Polynomial(degree=3, relative=True)
    """
    if name not in BASELINES:
        raise InputError(f"unknown baseline {name!r}; choose one of {sorted(BASELINES)}")
    cls, defaults = BASELINES[name]
    try:
        return cls(**{**defaults, **kwargs})
    except TypeError as exc:
        raise InputError(f"bad argument for baseline {name!r}: {exc}") from None

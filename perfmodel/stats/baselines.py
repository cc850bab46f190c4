"""Comparison models for step latency behind one fit/predict interface.

Problem: the saturation model (docs/model.md) must beat simpler or more flexible
models on the same data and the same validation splits to earn its
parameters. The alternatives are linear/polynomial regression and a
constant-throughput model (docs/model.md, Evaluation); DistServe's latency
model, Splitwise's interpolation, a roofline (calibrated on datasheet peaks,
or with its two ceilings fitted) and a random forest (as in Vidur) are the
peers.

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
    "HARDWARE_PEAKS",
    "Baseline",
    "ConstantThroughput",
    "DistServe",
    "LinearBS",
    "NonNegLinearCtx",
    "Polynomial",
    "RandomForest",
    "Roofline",
    "SplitwiseInterp",
    "TrainedRoofline",
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
    ``decode_ctx``, ``prefill_sq``, ``chunk_sd``) plus ``attn_prefill``, ``n_decode``
    (requests with c_i == 1) and ``s_prefill`` (tokens of requests with
    c_i > 1). A one-token prefill chunk counts as decode.
    """
    missing = [c for c in (_CHUNKS, _CTX) if c not in df.columns]
    if missing:
        raise InputError(f"`{name}` lacks column(s) {missing}, needed for per-request "
                         "features (';'-joined integers per step)")
    base = check_step_columns(df, need_y=False, name=name)
    n = len(df)
    keys = (*_CONTEXT, "attn_prefill", "n_decode", "s_prefill")
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
def _column_scale(X: np.ndarray) -> np.ndarray:
    """Largest absolute value of each column (1 for an all-zero column): the solvers' scaling."""
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    return scale


def _root_weights(y: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Square roots of the row weights (ones when unweighted)."""
    return np.ones_like(y) if w is None else np.sqrt(w)


def _lstsq(X: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(Weighted) least squares with column scaling; returns coef and rank."""
    scale = _column_scale(X)
    Xs = X / scale
    if w is not None:
        sw = np.sqrt(w)
        Xs, y = Xs * sw[:, None], y * sw
    coef, _, rank, _ = np.linalg.lstsq(Xs, y, rcond=None)
    return coef / scale, int(rank)


def _nnls(X: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, int]:
    """Non-negative (weighted) least squares with column scaling; returns coef and rank."""
    from scipy.optimize import nnls

    scale = _column_scale(X)
    Xs = X / scale
    sw = _root_weights(y, w)
    coef, _ = nnls(Xs * sw[:, None], y * sw, maxiter=50 * X.shape[1])
    return coef / scale, int(np.linalg.matrix_rank(Xs))


class Baseline:
    """Common interface: ``name``, ``n_params``, ``fit(df)``, ``predict(df)``."""

    name: str = "baseline"
    relative: bool = False
    #: the solver of :meth:`fit`: ``(X, y, weights) -> (coef, rank)`` (least squares; NNLS
    #: where every coefficient must be >= 0)
    _solve = staticmethod(_lstsq)
    #: the attribute that fitting sets and prediction needs
    _fitted_attr = "coef_"

    def __init__(self, relative: bool = False):
        self.relative = relative

    @property
    def n_params(self) -> int | None:
        """Number of fitted parameters (None when not a fixed number)."""
        return len(self._param_names)

    _param_names: tuple[str, ...] = ()

    def _check_relative(self) -> None:
        if not isinstance(self.relative, (bool, np.bool_)):
            raise InputError(f"`relative` must be True or False, got {self.relative!r}")

    def _train_features(self, df: pd.DataFrame) -> dict[str, np.ndarray]:
        """Check ``relative`` and the training trace; return its step features (with ``T``)."""
        self._check_relative()
        return check_step_columns(df, need_y=True)

    def _check_fitted(self) -> None:
        """Raise scikit-learn's ``NotFittedError`` before ``fit`` has run."""
        if not hasattr(self, self._fitted_attr):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(df) first")

    def _weights(self, T: np.ndarray) -> np.ndarray | None:
        # relative error is the fit's 'weight' scale (perfmodel.core.scale): weights 1/T^2
        return WEIGHT.weights(T) if self.relative else None

    @property
    def params_(self) -> dict[str, float]:
        """Fitted coefficients by name."""
        self._check_fitted()
        return dict(zip(self._param_names, map(float, self.coef_)))

    def _design(self, df: pd.DataFrame, feats: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, df: pd.DataFrame) -> Baseline:
        """Fit on a step trace with ``duration_ms``; return self."""
        feats = self._train_features(df)
        X = self._design(df, feats)
        self.coef_, self.rank_ = self._solve(X, feats["T"], self._weights(feats["T"]))
        self.n_train_ = len(df)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted step time (ms) for each row of ``df``."""
        self._check_fitted()
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

    def _design(self, df, feats):
        return np.column_stack([np.ones_like(feats["S"]), feats["S"]])

    def fit(self, df: pd.DataFrame) -> ConstantThroughput:
        """Fit a and 1/P >= 0 by bounded least squares; return self."""
        from scipy.optimize import lsq_linear

        feats = self._train_features(df)
        X, y = self._design(df, feats), feats["T"]
        scale = _column_scale(X)
        sw = _root_weights(y, self._weights(y))
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

    _fitted_attr = "pipeline_"

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
        feats = self._train_features(df)
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
        self._check_fitted()
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
    n_params = None
    _CTX_FEATURES = (*_CONTEXT, "n_decode")
    _fitted_attr = "forest_"

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
        feats = self._train_features(df)
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
        self._check_fitted()
        feats = check_step_columns(df, need_y=False)
        X = self._X(df, feats, len(self.features_) > 2)
        p = self.forest_.predict(X)
        return np.exp(p) if self.relative else p

    @property
    def feature_importances_(self) -> dict[str, float]:
        """Impurity importances by feature name."""
        self._check_fitted()
        return dict(zip(self.features_, map(float, self.forest_.feature_importances_)))

    def __repr__(self) -> str:
        return (f"RandomForest(n_estimators={self.n_estimators}, "
                f"relative={self.relative}, random_state={self.random_state})")


class NonNegLinearCtx(Baseline):
    """The ablation of the saturation core: non-negative least squares on its features.

    ``T = c_0 + c_B B + c_S S + c_attn A + c_kv ctx_sum + c_kvm ctx_sum [A > 0]``
    with every coefficient >= 0 (``A`` = ``attn_prefill``): the terms of
    ``seed_ctx_mono`` (docs/model.md) with the saturating ``a_1 S / (u v)``
    replaced by its large-batch limit, a cost per token. If this model
    predicts as well on the same folds, the saturation core does not earn its
    parameters there. Fitted by :func:`scipy.optimize.nnls` on column-scaled,
    (``relative``) ``1/T``-weighted rows. Verified: recovers the exact
    coefficients of noise-free synthetic data and puts a coefficient of a
    decreasing trend at 0 (tests).
    """

    name = "nnls_ctx"
    _param_names = ("c_0", "c_B", "c_S", "c_attn", "c_kv", "c_kv_mixed")
    _solve = staticmethod(_nnls)  # every coefficient >= 0

    def _design(self, df, feats):
        f = _request_features(df)
        mixed = (f["attn_prefill"] > 0).astype(float)
        return np.column_stack([np.ones(len(df)), feats["B"], feats["S"], f["attn_prefill"],
                                f["ctx_sum"], f["ctx_sum"] * mixed])


class SplitwiseInterp(Baseline):
    """Splitwise's performance model: interpolation over batch tokens, per phase.

    Splitwise (Patel et al., ISCA 2024, section on the simulator) predicts an
    iteration's time by interpolating profiled times over the number of
    tokens in the batch, separately for prefill and decode iterations. Here:
    a step is 'decode' when ``S == B`` (every request computes one token),
    else 'prefill'; per phase the profile is the median time at each distinct
    ``S`` of the training steps, linearly interpolated in ``S`` and linearly
    extrapolated from the two end knots beyond them (floored at the smallest
    profiled time). A phase absent from training uses the other's profile.
    ``n_params`` is None (one value per knot).
    """

    name = "splitwise_interp"
    n_params = None
    _fitted_attr = "profiles_"

    @staticmethod
    def _phase(feats):
        return feats["S"] == feats["B"]

    def fit(self, df: pd.DataFrame) -> SplitwiseInterp:
        """Build the per-phase profiles; return self."""
        feats = self._train_features(df)
        dec = self._phase(feats)
        self.profiles_ = {}
        for name, sel in (("decode", dec), ("prefill", ~dec)):
            if sel.any():
                prof = pd.Series(feats["T"][sel]).groupby(feats["S"][sel]).median()
                self.profiles_[name] = (prof.index.to_numpy(float), prof.to_numpy(float))
        self.n_train_ = len(df)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Interpolated step time (ms)."""
        self._check_fitted()
        feats = check_step_columns(df, need_y=False)
        dec = self._phase(feats)
        out = np.empty(len(df))
        for name, sel in (("decode", dec), ("prefill", ~dec)):
            if not sel.any():
                continue
            x, t = self.profiles_.get(name) or next(iter(self.profiles_.values()))
            out[sel] = _interp_extrap(feats["S"][sel], x, t)
        return out


def _interp_extrap(q: np.ndarray, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """np.interp inside the knots, the end segments' lines outside (>= min t)."""
    p = np.interp(q, x, t)
    if x.size >= 2:
        lo, hi = q < x[0], q > x[-1]
        p[lo] = t[0] + (q[lo] - x[0]) * (t[1] - t[0]) / (x[1] - x[0])
        p[hi] = t[-1] + (q[hi] - x[-1]) * (t[-1] - t[-2]) / (x[-1] - x[-2])
    return np.maximum(p, t.min())


#: dense BF16 tensor-core peak (TFLOP/s) and memory bandwidth (TB/s) by GPU name, from the
#: vendor's public product pages (NVIDIA H200 / H100 SXM datasheets; A100 80GB SXM)
HARDWARE_PEAKS: dict[str, tuple[float, float]] = {
    "NVIDIA H200": (989.4, 4.8),
    "NVIDIA H100 80GB HBM3": (989.4, 3.35),
    "NVIDIA A100-SXM4-80GB": (312.0, 2.039),
}


#: the keys of a Llama-style ``model_config`` the roofline counts need
_ROOF_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size")


def _flops_bytes(cfg, bytes_per_element, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs and bytes moved of each step (the :class:`Roofline` counts), after input checks."""
    if not isinstance(cfg, dict) or any(k not in cfg for k in _ROOF_KEYS):
        raise InputError(f"roofline needs `model_config` with keys {list(_ROOF_KEYS)}")
    e = bytes_per_element
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not e > 0:
        raise InputError(f"roofline needs `bytes_per_element` > 0, got {e!r}")
    h, inter, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hq = cfg["num_attention_heads"] * cfg["head_dim"]
    hkv = cfg["num_key_value_heads"] * cfg["head_dim"]
    V = cfg["vocab_size"]
    p_layer = h * (2 * hq + 2 * hkv) + 3 * h * inter
    feats = check_step_columns(df, need_y=False)
    f = _request_features(df)
    B, S = feats["B"], feats["S"]
    flops = L * (2.0 * S * p_layer + 4.0 * hq * f["attn"]) + 2.0 * B * h * V
    nbytes = e * (L * p_layer + h * V) + e * L * 2.0 * hkv * (f["ctx_sum"] + S)
    return flops, nbytes


class Roofline(Baseline):
    """A calibrated roofline from the model's shape and the hardware's peak numbers.

    Per step, FLOPs ``F = L (2 S P_layer + 4 h_q attn) + 2 B h V`` (``P_layer``
    weights per decoder layer, ``h_q = heads x head_dim``, ``attn`` =
    sum c_i (ctx_i + c_i/2), logits of each request's last token) and bytes
    ``M = e (L P_layer + h V) + e L 2 kv_heads head_dim (ctx_sum + S)`` (weights
    read once, the KV cache read and written; ``e`` bytes per element);
    ``T_roof = max(F / peak_flops, M / peak_bw)`` and ``T = a + b T_roof``
    with ``a, b >= 0`` (a launch overhead and an efficiency; 2 parameters).
    Needs the per-request lists, a Llama-style ``model_config`` (keys of
    ``data/gpu/trace.meta.json``) and the peaks.
    """

    name = "roofline"
    _param_names = ("a", "b")
    _solve = staticmethod(_nnls)  # a, b >= 0

    def __init__(self, model_config: dict | None = None, peak_tflops: float | None = None,
                 peak_tbps: float | None = None, bytes_per_element: int = 2,
                 relative: bool = False):
        self.model_config = model_config
        self.peak_tflops = peak_tflops
        self.peak_tbps = peak_tbps
        self.bytes_per_element = bytes_per_element
        self.relative = relative

    def roof_ms(self, df: pd.DataFrame) -> np.ndarray:
        """The uncalibrated roofline time (ms) of each step."""
        flops, nbytes = _flops_bytes(self.model_config, self.bytes_per_element, df)
        for v, nm in ((self.peak_tflops, "peak_tflops"), (self.peak_tbps, "peak_tbps")):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise InputError(f"roofline needs `{nm}` > 0, got {v!r}")
        return 1e3 * np.maximum(flops / (self.peak_tflops * 1e12), nbytes / (self.peak_tbps * 1e12))

    def _design(self, df, feats):
        return np.column_stack([np.ones(len(df)), self.roof_ms(df)])


class TrainedRoofline(Baseline):
    """A roofline whose two peaks are fitted: for hardware whose peaks are not known.

    ``T = a + max(F / pi, M / beta)`` with ``a >= 0`` (ms), ``pi > 0`` and
    ``beta > 0`` (the effective compute rate and bandwidth), ``F`` and ``M``
    the FLOPs and bytes of :class:`Roofline` (the same counts, from the
    model's shape); the roofline of Williams, Waterman and Patterson
    (CACM 2009) with its two ceilings measured on the data instead of read
    from a datasheet. Fitted by bounded
    nonlinear least squares (:func:`scipy.optimize.least_squares`, 'trf') in
    ``(a, 1/pi, 1/beta)`` with every value >= 0, on column-scaled ``F`` and
    ``M`` and (``relative``) ``1/T``-weighted residuals. The maximum makes
    the loss piecewise smooth, so three starts are tried and the lowest loss
    kept: from the two single-roof fits (``T = a + F/pi`` and ``T = a + M/beta``,
    each by non-negative least squares), both ceilings at their single-roof
    values, and each single-roof fit with the other ceiling at half its
    single-roof value. ``params_``: ``a`` (ms), ``inv_pi`` (ms/FLOP),
    ``inv_beta`` (ms/byte); ``peak_tflops_`` and ``peak_tbps_`` the fitted
    ceilings (TFLOP/s, TB/s; inf where a ceiling never binds). Needs the
    per-request lists and ``model_config``; ``bytes_per_element`` as the
    trace's dtype (4 for float32). Verified: recovers the peaks and overhead
    of noise-free steps generated from known ones (tests).
    """

    name = "trained_roofline"
    _param_names = ("a", "inv_pi", "inv_beta")

    def __init__(self, model_config: dict | None = None, bytes_per_element: int = 2,
                 relative: bool = False):
        self.model_config = model_config
        self.bytes_per_element = bytes_per_element
        self.relative = relative

    def _design(self, df, feats):
        return np.column_stack(_flops_bytes(self.model_config, self.bytes_per_element, df))

    def fit(self, df: pd.DataFrame) -> TrainedRoofline:
        """Fit the overhead and the two ceilings (class docstring); return self."""
        from scipy.optimize import least_squares

        feats = self._train_features(df)
        FM = self._design(df, feats)
        T = feats["T"]
        scale = _column_scale(FM)
        X = FM / scale
        w = _root_weights(T, self._weights(T))
        one = np.ones_like(T)

        def resid(p):
            return w * (p[0] + np.maximum(p[1] * X[:, 0], p[2] * X[:, 1]) - T)

        def jac(p):
            comp = p[1] * X[:, 0] >= p[2] * X[:, 1]
            return w[:, None] * np.column_stack([one, X[:, 0] * comp, X[:, 1] * ~comp])

        (aF, uF), _ = _nnls(np.column_stack([one, X[:, 0]]), T, self._weights(T))
        (aM, vM), _ = _nnls(np.column_stack([one, X[:, 1]]), T, self._weights(T))
        starts = [(min(aF, aM), uF, vM), (aF, uF, 0.5 * vM), (aM, 0.5 * uF, vM)]
        best = None
        for x0 in starts:
            x0 = np.maximum(np.asarray(x0, float), 0.0)
            res = least_squares(resid, x0, jac=jac, bounds=(0.0, np.inf), method="trf",
                                x_scale="jac")
            if best is None or res.cost < best.cost:
                best = res
        self.coef_ = best.x / np.array([1.0, scale[0], scale[1]])
        self.rank_ = int(np.linalg.matrix_rank(np.column_stack([one, X])))
        self.peak_tflops_, self.peak_tbps_ = (float(np.inf) if c == 0 else float(1e-9 / c)
                                              for c in self.coef_[1:])
        self.n_train_ = len(df)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Predicted step time (ms)."""
        self._check_fitted()
        feats = check_step_columns(df, need_y=False)
        FM = self._design(df, feats)
        return self.coef_[0] + np.maximum(self.coef_[1] * FM[:, 0], self.coef_[2] * FM[:, 1])


#: name -> (class, default keyword arguments)
BASELINES: dict[str, tuple[type, dict]] = {
    "linear": (LinearBS, {}),
    "poly2": (Polynomial, {"degree": 2}),
    "poly3": (Polynomial, {"degree": 3}),
    "constant_throughput": (ConstantThroughput, {}),
    "distserve": (DistServe, {}),
    "random_forest": (RandomForest, {}),
    "nnls_ctx": (NonNegLinearCtx, {}),
    "splitwise_interp": (SplitwiseInterp, {}),
    "roofline": (Roofline, {}),
    "trained_roofline": (TrainedRoofline, {}),
}


def get_baseline(name: str, **kwargs) -> Baseline:
    """A new, unfitted baseline by registry name.

    Parameters
    ----------
    name : str
        One of ``BASELINES``: 'linear', 'poly2', 'poly3',
        'constant_throughput', 'distserve', 'random_forest', 'nnls_ctx',
        'splitwise_interp', 'roofline', 'trained_roofline'.
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

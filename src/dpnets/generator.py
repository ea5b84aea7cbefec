"""Generator of an SDE on a feature map: continuous-time operator regression (paper Sec. 3
"Generator learning", App. E).

The estimator shares the downstream API of :class:`dpnets.spectral.SpectralModel`
(eigenvalues, eigenfunctions, forecasts, timescales); its forecasts hold at any real time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from dpnets import diagnostics
from dpnets.biased import importance_weights
from dpnets.diagnostics import ABOVE_ONE_TOL
from dpnets.estimation import estimate_generator, generator_spectrum
from dpnets.exceptions import check_is_fitted
from dpnets.io import arrays_to_tensors, register, tensors_to_arrays
from dpnets.ito import SDE, check_samples, derivatives_in_chunks, warn_if_piecewise_linear
from dpnets.moments import Moments
from dpnets.nn.utils import module_device
from dpnets.pairs import PairSegment
from dpnets.params import (
    BATCH_SIZE,
    Constraint,
    boolean,
    check_choice,
    checked_in_fit,
    instance_of,
    one_of,
    satisfies,
)
from dpnets.spectral import (
    SpectralModel,
    dump_feature_map,
    dump_fitted_scalars,
    features_on_demand,
    regression_constraints,
    restore_feature_map,
    restore_fitted_state,
)
from dpnets.states import check_state_shape, check_states, is_streaming, to_numpy

__all__ = ["Generator"]


def _torch_features(features: Any, dtype: torch.dtype) -> tuple[Callable, torch.device]:
    """A torch feature function on ``dtype`` inputs, and its device.

    Modules (and a fitted DPNet's encoder) are copied and cast to ``dtype``, so that the
    estimator's Itô derivatives are computed in float64 whatever the training precision.
    """
    if features is None:
        return (lambda x: x.reshape(x.shape[0], -1)), torch.device("cpu")
    if hasattr(features, "feature_module"):  # a fitted DPNet: standardisation + encoder
        features = features.feature_module()
    if isinstance(features, torch.nn.Module):
        module = copy.deepcopy(features)
        device = module_device(module)
        if any(p.is_floating_point() for p in module.parameters()):
            module = module.to(dtype)
        module.eval()
        return module, device
    if callable(features):
        return features, torch.device("cpu")
    raise TypeError(
        "Generator features must be None (identity), a fitted DPNet, a torch.nn.Module or a "
        "torch callable states -> (n, r)"
    )


class Generator(SpectralModel):
    r"""Least-squares estimator of the generator of an SDE on a feature map (App. E).

    For ``dX = A(X) dt + B(X) dW`` (Eq. 11) and samples ``x_1..x_n`` of the invariant law,
    fits ``L = (Cx + ridge I)^+ C_d`` with ``Cx = Phi^T Phi / n`` and
    ``C_d = Phi^T dPhi / n``, where ``dPhi`` holds the Itô derivatives of the features
    (Eqs. 12-13, :func:`dpnets.ito.ito_derivative`). Its eigen-decomposition (App. E) gives
    the generator's eigenvalues ``lambda_i`` (rates, ``Re lambda <= 0``), eigenfunctions, the
    implied timescales ``-1 / lambda_i`` and forecasts at any real time ``t >= 0``:
    ``E[f(X_t) | X_0 = x] ~ sum_i exp(lambda_i t) phi_i(x) l_i^H D_f`` with
    ``D_f = (Cx + ridge I)^+ Phi^T F / n`` the *equal-time* least-squares coefficients of the
    observable (App. E, continuous-time KMD).

    Parameters
    ----------
    features : DPNet, nn.Module, callable or None
        Feature map ``psi`` as a differentiable torch function (twice, for ``form="ito"``):
        a fitted :class:`dpnets.DPNet` (e.g. trained with ``objective="generator"``), a
        ``torch.nn.Module``, a callable on torch tensors, or ``None`` for linear features
        (the flattened state). Modules are evaluated in ``dtype`` (a float64 copy).
    sde : dpnets.ito.SDE, optional
        The process; default: ``features.sde`` for a DPNet trained in generator mode.
        Alternatively give ``drift`` and ``diffusion``.
    drift, diffusion : optional
        ``A`` and ``B`` as in :class:`dpnets.ito.SDE` (instead of ``sde``).
    form : {"ito", "dirichlet"}, default "ito"
        ``"ito"``: ``C_d = E[psi (L psi)^T]`` from second derivatives (any diffusion).
        ``"dirichlet"``: ``C_d = -1/2 E[grad psi B B^T grad psi^T]``, first derivatives
        only and symmetric; valid for reversible diffusions only (equal to ``"ito"`` in
        expectation there).
    symmetrize : bool, default False
        Replace ``C_d`` by its symmetric part (for reversible processes: a self-adjoint
        estimator with real spectrum; leave False otherwise).
    constant : {"auto", True, False}, default "auto"
        Add the constant function (eigenvalue 0, the stationary state) to the features;
        "auto" adds it unless the features already span it, as in
        :class:`TransferOperator`.
    ridge : float, default 0.0
        Tikhonov regularisation added to ``Cx``.
    rtol : float, optional
        Relative rank cut-off of the pseudo-inverse (default ``r * eps``).
    batch_size : int, default 8192
        States per derivative evaluation.
    dtype : torch.dtype, default torch.float64

    Attributes
    ----------
    operator_ : ndarray (r, r)
        ``L``.
    cx_, cxd_ : ndarray (r, r)
        ``Cx`` and ``C_d``.
    eigvals_ : ndarray (cx_rank_,), complex
        Eigenvalues sorted by *decreasing real part* (``lambda_0 ~ 0`` first).
    left_eigvecs_, right_eigvecs_ : ndarray (r, cx_rank_), complex
        Biorthogonal eigenvectors (``L^H R = I``); right eigenfunctions have unit empirical
        norm (in the ``Cx + ridge I`` metric).
    partial_trace_ : float
        ``tr((Cx + ridge I)^+ C_d)``, the generator score ``P_d^0`` of the features (Eq. 14).
    cx_rank_, n_samples_, n_features_, state_shape_

    Notes
    -----
    The eigen-decomposition is computed on the range of ``Cx + ridge I`` (whitened Ritz
    problem): a rank-deficient feature map (``cx_rank_ < n_features_``) gives ``cx_rank_``
    eigenpairs, without the spurious zero eigenvalues of the pseudo-inverse's null space.
    Raise ``rtol`` to cut ill-conditioned directions of large fixed dictionaries. A loaded
    model has ``sde=None``: it predicts and decomposes, but needs an SDE to be refitted.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from dpnets import Generator
    >>> from dpnets.ito import SDE
    >>> ou = SDE(lambda x: -x, 2**0.5, reversible=True)          # dX = -X dt + sqrt(2) dW
    >>> psi = lambda x: torch.cat([x**0, x, x**2 - 1], dim=1)    # Hermite polynomials
    >>> x = np.random.default_rng(0).standard_normal((1000, 1))
    >>> np.round(Generator(psi, ou).fit(x).eig().real, 8) + 0.0
    array([ 0., -1., -2.])
    """

    _generator_spectrum = True  # stable for eigenvalues of real part at most 0

    #: every constructor parameter's accepted values (:mod:`dpnets.params`), checked by
    #: ``fit`` and by :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "features": checked_in_fit("_torch_features (a feature map differentiable in torch)"),
        "sde": instance_of(SDE, "a dpnets.ito.SDE or None"),
        "drift": satisfies(callable, "a callable or None", none=True),
        "diffusion": checked_in_fit("dpnets.ito.SDE (a scalar, an array or a callable)"),
        "form": one_of("ito", "dirichlet"),
        "symmetrize": boolean(),
        **regression_constraints("ridge", "rtol", "constant"),
        "batch_size": BATCH_SIZE,
        "dtype": instance_of(torch.dtype, "a torch.dtype", none=False),
    }

    def __init__(
        self,
        features: Any = None,
        sde: Any = None,
        *,
        drift: Callable | None = None,
        diffusion: Any = None,
        form: str = "ito",
        symmetrize: bool = False,
        ridge: float = 0.0,
        rtol: float | None = None,
        batch_size: int = 8192,
        dtype: torch.dtype = torch.float64,
        constant: str | bool = "auto",
    ) -> None:
        self.features = features
        self.sde = sde
        self.drift = drift
        self.diffusion = diffusion
        self.form = form
        self.symmetrize = symmetrize
        self.ridge = ridge
        self.rtol = rtol
        self.batch_size = batch_size
        self.dtype = dtype
        self.constant = constant

    # ------------------------------------------------------------------ helpers
    def _resolve_sde(self):

        if self.sde is not None:
            if self.drift is not None or self.diffusion is not None:
                raise ValueError("give either sde or drift and diffusion, not both")
            if not isinstance(self.sde, SDE):
                raise TypeError(f"sde must be a dpnets.ito.SDE, got {type(self.sde).__name__}")
            return self.sde
        if self.drift is not None or self.diffusion is not None:
            if self.drift is None or self.diffusion is None:
                raise ValueError("drift and diffusion must be given together")
            return SDE(self.drift, self.diffusion)
        inherited = getattr(self.features, "sde", None)  # a DPNet trained on this SDE
        if isinstance(inherited, SDE):
            return inherited
        raise ValueError(
            "the SDE is unknown: pass sde=dpnets.ito.SDE(...) (or drift= and diffusion=)"
        )

    def _evaluate(
        self,
        x: np.ndarray,
        what: str,
        sde: Any = None,
        constant: bool = False,
        torch_features: tuple[Callable, torch.device] | None = None,
    ):
        """Features (and derivatives) of states ``x`` in chunks, as float64 numpy; with
        ``constant`` the constant function comes first (its derivatives are zero).
        ``torch_features``: the output of :func:`_torch_features` for ``features_``, when
        the caller evaluates many chunks (it copies the module)."""
        from dpnets.scores import with_constant

        if torch_features is None:
            torch_features = _torch_features(self.features_, self.dtype)
        fn, device = torch_features
        if constant:
            base = fn

            def fn(xb: torch.Tensor) -> torch.Tensor:
                return with_constant(base(xb))

        outs: list[list[np.ndarray]] = []
        with torch.no_grad():
            parts = derivatives_in_chunks(
                fn, x, what, sde, chunk=int(self.batch_size), device=device, dtype=self.dtype
            )
            for res in parts:
                outs.append([to_numpy(r).astype(np.float64) for r in res])
        arrays = [np.concatenate(parts) for parts in zip(*outs, strict=True)]
        phi = arrays[0]
        if phi.ndim != 2 or phi.shape[0] != x.shape[0]:
            raise ValueError(f"feature map must return shape (n, r); got {phi.shape}")
        for a in arrays:
            if not np.all(np.isfinite(a)):
                raise ValueError("the feature map or its derivatives returned NaN or inf")
        return arrays

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, sample_weight: Any = None, *, log_weights: Any = None) -> Generator:
        """Estimate the generator from samples ``X`` of the invariant distribution.

        One pass over the samples in chunks of ``batch_size``: the features and their
        derivatives of each chunk are computed and their moments accumulated in float64
        (:class:`dpnets.moments.Moments`), so the memory does not grow with the number of
        samples; memory-mapped arrays and ``h5py.Dataset`` objects are read a chunk at a
        time. ``fit`` is :meth:`partial_fit` on a fresh model.

        Parameters
        ----------
        X : array (n, *state_shape) or list of arrays
            States distributed according to the invariant law (e.g. a long trajectory, or
            trajectories observed at irregular times); their order does not matter.
        sample_weight : array (n,), optional
            Non-negative weights of the samples (e.g. quadrature weights, or importance
            weights ``exp(beta V)`` for samples of a law biased by ``V``: the unbiased
            generator, whatever the bias, Devergne et al., NeurIPS 2024); all expectations,
            including the observables' least-squares coefficients, are weighted. Default:
            uniform.
        log_weights : array (n,) or list of arrays, optional
            Instead of ``sample_weight``: ``beta V`` of each sample, the weights being
            ``exp(log_weights)`` (:func:`dpnets.biased.importance_weights`; one array of all
            samples or one per array of ``X``); both at once are refused.

        Returns
        -------
        self

        Notes
        -----
        The model keeps a reference to ``X`` (not a copy), from which the features of the
        training samples are recomputed for observables given on them.
        """
        sde = self._check_fit_params()
        self._accumulate(X, (sample_weight, log_weights), sde, fresh=True)
        return self

    def partial_fit(
        self, X: Any, sample_weight: Any = None, *, log_weights: Any = None
    ) -> Generator:
        """Add samples ``X`` to the statistics of the fit and update the generator.

        For samples that arrive in pieces: ``partial_fit`` over pieces equals :meth:`fit`
        on the list of them (to round-off). A call on a fresh model starts the statistics;
        :meth:`fit` restarts them.

        Parameters
        ----------
        X : array (n, *state_shape) or list of arrays
            One piece of samples.
        sample_weight : array (n,), optional
            Non-negative weights of this piece's samples, on the same scale for all pieces
            (a piece without weights weighs 1 per sample).
        log_weights : array (n,) or list of arrays, optional
            Instead of ``sample_weight``, ``beta V`` of each sample (as in :meth:`fit`).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            If the state shape differs from the earlier pieces or the model holds no
            statistics to add to (a model loaded from a file).
        """
        if getattr(self, "_stats", None) is None and "operator_" in vars(self):
            raise ValueError(
                "this model holds no accumulated statistics (it was loaded from a file): call "
                "fit, or partial_fit on a new model"
            )
        sde = self._check_fit_params()
        fresh = getattr(self, "_stats", None) is None
        self._accumulate(X, (sample_weight, log_weights), sde, fresh=fresh)
        return self

    def _check_fit_params(self) -> Any:
        """Validate the parameters; the SDE in use."""
        self._check_params()
        sde = self._resolve_sde()
        if self.form == "dirichlet" and not sde.reversible:
            raise ValueError(
                "form='dirichlet' needs a reversible SDE (SDE(..., reversible=True)); use "
                "form='ito' otherwise"
            )
        return sde

    @staticmethod
    def _samples(X: Any) -> list:
        """The validated sample arrays of ``X``, not concatenated (out-of-core arrays stay
        out of core)."""

        if not isinstance(X, list):
            if isinstance(X, tuple) or is_streaming(X):
                check_samples(X)  # raises the error naming the accepted forms
            return [check_states(X, "X", lazy=True)]
        if not X:
            raise ValueError("empty list of trajectories")
        parts = [check_states(t, f"trajectory {k}", lazy=True) for k, t in enumerate(X)]
        if any(p.shape[1:] != parts[0].shape[1:] for p in parts):
            raise ValueError("all trajectories must have the same state shape")
        return parts

    def _accumulate(self, X: Any, weights: tuple[Any, Any], sde: Any, fresh: bool) -> None:
        """Add the moments of samples ``X`` weighted by ``weights`` (``(sample_weight,
        log_weights)``, :func:`dpnets.biased.importance_weights`; new statistics when
        ``fresh``), then refit; the statistics change only once the whole piece has been
        read."""

        parts = self._samples(X)
        shape = tuple(parts[0].shape[1:])
        if not fresh:
            check_state_shape(shape, self.state_shape_, type(self).__name__)
        w = importance_weights(*weights, [int(p.shape[0]) for p in parts])
        if fresh:
            self.features_, self.lag_ = self.features, None  # continuous time: no lag
            if self.form == "ito" and isinstance(
                getattr(self.features_, "encoder_", None), torch.nn.Module
            ):
                warn_if_piecewise_linear(self.features_.encoder_)
            elif self.form == "ito" and isinstance(self.features_, torch.nn.Module):
                warn_if_piecewise_linear(self.features_)
            stats = Moments([("x", "x"), ("x", "t")] + ([("x", "d")] if self.form == "ito" else []))
            dirichlet = np.zeros(())
            inputs: list = []
            weights: list = []
        else:
            stats = copy.deepcopy(self._stats)
            dirichlet = self._dirichlet.copy()
            inputs, weights = list(self._train_inputs), list(self._weights)
        start = 0
        torch_features = _torch_features(self.features_, self.dtype)
        for part in parts:
            seg = PairSegment(part, part, 0, 0, int(part.shape[0]))
            for x in seg.x_chunks(int(self.batch_size)):
                wb = None if w is None else w[start : start + x.shape[0]]
                start += x.shape[0]
                phi, d = self._evaluate(x, self.form, sde, True, torch_features)
                blocks = {"x": phi, "t": x.reshape(x.shape[0], -1)}
                if self.form == "ito":
                    blocks["d"] = d
                elif wb is None:
                    dirichlet = dirichlet + np.einsum("nim,njm->ij", d, d)
                else:
                    dirichlet = dirichlet + np.einsum("n,nim,njm->ij", wb, d, d)
                stats.update(blocks, wb)
            inputs.append(seg)
            weights.append(None if w is None else w[start - seg.n : start])
        self._stats, self._dirichlet = stats, dirichlet
        self._train_inputs, self._weights = inputs, weights
        self.state_shape_ = shape
        self._set_fit_from_moments()

    def _set_fit_from_moments(self) -> None:
        """The generator and every fitted array from the accumulated moments."""
        fit = estimate_generator(
            self._stats,
            self._dirichlet,
            form=self.form,
            symmetrize=bool(self.symmetrize),
            ridge=float(self.ridge),
            rtol=self.rtol,
            constant=self.constant,
        )
        for name in ("operator", "cx", "cx_pinv", "cx_rank", "state_coef", "constant"):
            setattr(self, name + "_", getattr(fit, name))
        self.cxd_, self.partial_trace_ = fit.cxy, float(np.trace(fit.operator))
        self.n_samples_, self.n_features_ = fit.n_samples, fit.n_features
        self.eigvals_, self.left_eigvecs_, self.right_eigvecs_ = (
            fit.eigvals,
            fit.left_eigvecs,
            fit.right_eigvecs,
        )
        self.sample_weight_ = None
        if any(w is not None for w in self._weights):  # normalised to mean one
            raw = [
                np.ones(s.n) if w is None else w
                for s, w in zip(self._train_inputs, self._weights, strict=True)
            ]
            self.sample_weight_ = np.concatenate(raw) * (fit.n_samples / self._stats.weight)
        diagnostics.warn(self._diagnostics())

    def _weigh(self, f: np.ndarray) -> np.ndarray:
        """Observable values times the (normalised) sample weights of the fit."""
        w = getattr(self, "sample_weight_", None)
        return f if w is None else f * w[:, None]

    features_x_ = property(
        lambda self: features_on_demand(self),
        doc="The training samples' features (n, r), computed on demand from the training "
        "inputs (they are not stored; None for a model loaded from a file).",
    )

    def _set_spectrum(self) -> None:
        """The eigen-decomposition of a restored generator on the range of ``Cx`` (the Ritz
        problem, :func:`dpnets.estimation.generator_spectrum`, as in the fit)."""
        self.eigvals_, self.left_eigvecs_, self.right_eigvecs_ = generator_spectrum(
            self.cx_,
            self.cxd_,
            float(self.ridge),
            self.rtol,
            self._basis_mean(),
        )

    def transform(self, X: Any) -> np.ndarray:
        """Features ``psi(X)`` (evaluated in ``dtype``), float64 (n, r)."""
        check_is_fitted(self, "operator_")
        return self._evaluate(self._check_X(X), "features", constant=self.constant_)[0]

    # ------------------------------------------------------------------ time
    def _check_time(self, t: Any, unit: str = "steps") -> float:
        """A generator forecasts at any real time ``t >= 0`` (in the units of the SDE's
        time; ``unit`` is accepted as ``"steps"`` or ``"time"``, both meaning that)."""
        check_choice("unit", unit, ("steps", "time"))
        if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)):
            raise ValueError(f"t must be a real number >= 0, got {t!r}")
        if not (np.isfinite(t) and t >= 0):
            raise ValueError(f"t must be a finite real number >= 0, got {t!r}")
        return float(t)

    def _time_factor(self, t: float) -> np.ndarray:
        return np.exp(self.eigvals_ * float(t))

    def _power(self, t: float) -> np.ndarray:
        import scipy.linalg

        return scipy.linalg.expm(self.operator_ * float(t))

    def implied_timescales(self) -> np.ndarray:
        """Implied timescales ``-1 / Re(lambda_i)``.

        Returns
        -------
        ndarray (cx_rank_,)
            In the order of :meth:`eig`, in the time units of the SDE; ``inf`` where
            ``|Re(lambda_i)| <= tol`` with ``tol = r * eps * max|lambda|`` (the stationary
            eigenvalue 0 up to round-off) and up to ``1e-6 max|lambda|`` above 0; ``nan``
            for a larger positive real part (a growing mode: the fit warns,
            :mod:`dpnets.diagnostics`).
        """
        check_is_fitted(self, "operator_")
        re = self.eigvals_.real
        top = max(np.abs(self.eigvals_).max(), 1e-300)
        tol = re.size * np.finfo(np.float64).eps * top
        out = np.full(re.shape, np.inf)
        ok = re < -tol
        out[ok] = -1.0 / re[ok]
        out[re > ABOVE_ONE_TOL * top] = np.nan
        return out


#: saved arrays; the n x r training features are not saved (file size independent of n)
_GENERATOR_ARRAYS = ("operator_", "cx_", "cxd_", "cx_pinv_", "state_coef_")


def _dump_generator(model: Generator, tensors: dict) -> dict:
    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _GENERATOR_ARRAYS, tensors)
    if getattr(model, "sample_weight_", None) is not None:
        arrays_to_tensors(model, ("sample_weight_",), tensors)
    return {
        "params": {
            "form": model.form,
            "symmetrize": bool(model.symmetrize),
            "ridge": float(model.ridge),
            "rtol": model.rtol,
            "batch_size": int(model.batch_size),
            "constant": model.constant,
        },
        "fitted": {**dump_fitted_scalars(model), "partial_trace_": float(model.partial_trace_)},
        **dump_feature_map(model, tensors),
    }


def _restore_generator(cfg: dict, tensors: dict, **kw: Any) -> Generator:
    params = {"constant": False, **cfg["params"]}  # files before the constant: none added
    features, fitted = restore_feature_map(cfg, tensors, **kw)
    gen = Generator(features, **params)
    gen.features_ = fitted
    tensors_to_arrays(gen, tensors, _GENERATOR_ARRAYS, ("sample_weight_",))
    restore_fitted_state(gen, cfg["fitted"], tensors)
    gen.partial_trace_ = float(cfg["fitted"]["partial_trace_"])
    return gen


register("generator", Generator, _dump_generator, _restore_generator)

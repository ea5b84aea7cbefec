"""Tests for ``dpnets.baselines`` against ground truth.

Ground truth: the eigenvalues of ``A`` for a linear-Gaussian system, ``e^{-k theta dt}`` for the
Ornstein-Uhlenbeck process, the closed-form kernel regression formulas (Kostic et al. 2022)
computed here independently from the Gram matrices, and exact algebraic identities
(Nyström with every state as a centre = exact kernel regression; linear kernel = DMD;
VAMPNet = DPNet with the VAMP-2 score and gamma=0).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import scipy.linalg
import torch
from scipy.special import comb

import dpnets
from dpnets import DPNet, TransferOperator
from dpnets.baselines import (
    DMD,
    EDMD,
    ConsistentAutoencoder,
    DynamicAutoencoder,
    Kernel,
    KernelDMD,
    NystromKernelDMD,
    VAMPNet,
    chebyshev_features,
    monomial_features,
)
from dpnets.baselines.autoencoders import consistency_penalty
from dpnets.exceptions import NotFittedError
from dpnets.nn import MLP
from dpnets.systems import LinearGaussian, OrnsteinUhlenbeck

A = np.array([[0.9, 0.3], [-0.3, 0.8]])  # eigenvalues 0.85 +- 0.296i


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small problems: one BLAS/torch thread (much faster on busy, oversubscribed cores)."""
    n_torch = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(1)
    with limits:
        yield
    torch.set_num_threads(n_torch)


@pytest.fixture(scope="module")
def lgs() -> LinearGaussian:
    return LinearGaussian(A, noise_std=0.1)


@pytest.fixture(scope="module")
def traj(lgs: LinearGaussian) -> np.ndarray:
    return lgs.sample(2000, seed=0)


def match_error(estimated: np.ndarray, true: np.ndarray) -> float:
    """Largest distance from a true eigenvalue to the nearest estimated one."""
    return float(np.abs(true[:, None] - np.asarray(estimated)[None, :]).min(axis=1).max())


def mode_products(model, x: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """``right_i(x) left_i(x')``: invariant to the scaling/phase of each eigenpair."""
    r = model.eigenfunctions(x)
    left = model.eigenfunctions(x2, side="left")
    return np.einsum("ai,bi->abi", r, left)


# --------------------------------------------------------------------------- dictionaries
def test_chebyshev_and_monomial_dictionaries() -> None:
    x = np.linspace(0.0, 1.0, 11)
    cheb = chebyshev_features(6, domain=(0, 1))
    np.testing.assert_allclose(cheb(x), np.polynomial.chebyshev.chebvander(2 * x - 1, 6))
    x3 = np.random.default_rng(0).normal(size=(5, 3))
    assert chebyshev_features(4)(x3).shape == (5, comb(3 + 4, 3, exact=True))
    mono = monomial_features(2)(x3[:, :2])
    a, b = x3[:, 0], x3[:, 1]
    np.testing.assert_allclose(mono, np.stack([a**0, a, b, a * a, a * b, b * b], axis=1))
    np.testing.assert_allclose(monomial_features(1, include_constant=False)(x3), x3)
    with pytest.raises(ValueError, match="domain"):
        chebyshev_features(3, domain=(1, 0))
    with pytest.raises(ValueError, match="degree"):
        monomial_features(-1)


# --------------------------------------------------------------------------- DMD / EDMD
def test_dmd_recovers_eigenvalues(lgs: LinearGaussian, traj: np.ndarray) -> None:
    dmd = DMD().fit(traj)
    assert match_error(dmd.eig(), lgs.eigvals()) < 0.02
    assert dmd.features_ is None
    # rank = d is a rotation of the full state: same estimator
    full = TransferOperator(None, constant=False).fit(traj)
    x = traj[:20]
    np.testing.assert_allclose(
        DMD(rank=2).fit(traj).predict(x, t=[1, 4]), full.predict(x, t=[1, 4]), atol=1e-12
    )


def test_dmd_rank_truncation_on_embedded_system(lgs: LinearGaussian) -> None:
    # a 2-D system embedded in R^5, plus tiny independent noise off the plane
    rng = np.random.default_rng(1)
    embed = np.linalg.qr(rng.normal(size=(5, 2)))[0]
    z = lgs.sample(1500, seed=2)
    x = z @ embed.T + 1e-6 * rng.normal(size=(1500, 5))
    dmd = DMD(rank=2).fit(x)
    assert dmd.n_features_ == 2 and dmd.eig().shape == (2,)
    assert match_error(dmd.eig(), lgs.eigvals()) < 0.02
    # the POD basis spans the plane; forecasts live in R^5 and modes map back to the state
    comp = dmd.projection_.components
    np.testing.assert_allclose(comp @ comp.T, embed @ embed.T, atol=1e-4)
    assert dmd.predict(x[:3], t=2).shape == (3, 5)
    assert dmd.modes().shape == (2, 5)
    assert dmd.singular_values_.shape == (5,)


def test_edmd_linear_and_chebyshev(lgs: LinearGaussian, traj: np.ndarray) -> None:
    edmd = EDMD("monomial", degree=1).fit(traj)  # [1, x]: the constant adds eigenvalue 1
    ev = edmd.eig()
    assert match_error(ev, np.r_[1.0, lgs.eigvals()]) < 0.02
    assert match_error(ev, lgs.eigvals()) < 0.02
    cheb = EDMD("chebyshev", degree=1).fit(traj)  # T_0, T_1 on the data's box: same span
    np.testing.assert_allclose(np.sort_complex(cheb.eig()), np.sort_complex(ev), atol=1e-10)
    lo, hi = traj.min(axis=0), traj.max(axis=0)
    np.testing.assert_allclose(cheb.dictionary_.low, lo)
    np.testing.assert_allclose(cheb.dictionary_.high, hi)
    user = EDMD(lambda s: np.c_[np.ones(len(s)), s]).fit(traj)
    np.testing.assert_allclose(user.predict(traj[:5], t=3), edmd.predict(traj[:5], t=3))


# --------------------------------------------------------------------------- kernel DMD
def test_kernel_dmd_linear_kernel_equals_dmd(lgs: LinearGaussian, traj: np.ndarray) -> None:
    full = TransferOperator(None, constant=False).fit(traj)
    x, x2 = traj[:9], traj[100:109]
    for est in ("rrr", "pcr"):
        kd = KernelDMD("linear", rank=2, estimator=est, ridge=0.0).fit(traj)
        assert match_error(kd.eig(), lgs.eigvals()) < 0.02
        np.testing.assert_allclose(kd.eig(), full.eig(), atol=1e-10)
        np.testing.assert_allclose(kd.predict(x, t=[1, 3]), full.predict(x, t=[1, 3]), atol=1e-10)
        np.testing.assert_allclose(mode_products(kd, x, x2), mode_products(full, x, x2), atol=1e-10)
        np.testing.assert_allclose(kd.implied_timescales(), full.implied_timescales(), rtol=1e-8)


@pytest.fixture(scope="module")
def ou_pairs() -> tuple[np.ndarray, np.ndarray]:
    traj = OrnsteinUhlenbeck(dt=0.1).sample(401, seed=3)
    return traj[:-1], traj[1:]


def test_kernel_ridge_regression_matches_closed_form(ou_pairs) -> None:
    X, Y = ou_pairs
    n, lam = len(X), 1e-4
    k = Kernel("rbf", length_scale=1.0)
    model = KernelDMD("rbf", length_scale=1.0, estimator="krr", ridge=lam).fit((X, Y))
    W = np.linalg.inv(k(X, X) + n * lam * np.eye(n))  # G = S^* (K_X + lam)^{-1} Z
    kyx = k(Y, X)
    xt = np.linspace(-2.5, 2.5, 13)[:, None]
    F = np.sin(Y)
    for t in (1, 2, 5):
        direct = k(xt, X) @ W @ np.linalg.matrix_power(kyx @ W, t - 1) @ F
        np.testing.assert_allclose(model.predict(xt, t=t, observable=F), direct, atol=1e-9)
    # non-zero eigenvalues of G are those of W K_YX
    ev = scipy.linalg.eigvals(W @ kyx)
    ev = ev[np.argsort(-np.abs(ev))][:5]
    np.testing.assert_allclose(np.abs(model.eig()[:5]), np.abs(ev), atol=1e-9)


def test_reduced_rank_regression_matches_kernel_formulas(ou_pairs) -> None:
    """RRR from the generalized eigenproblem K_Y K_X u = s^2 (K_X + lam) u (Kostic 2022)."""
    X, Y = ou_pairs
    n, lam, r = len(X), 1e-4, 4
    k = Kernel("rbf", length_scale=1.0)
    kx, ky, kyx = k(X, X) / n, k(Y, Y) / n, k(Y, X) / n
    s2, U = scipy.linalg.eig(ky @ kx, kx + lam * np.eye(n))
    U = U[:, np.argsort(-s2.real)[:r]].real
    U = U @ np.linalg.inv(np.linalg.cholesky(U.T @ (kx @ kx + lam * kx) @ U)).T
    V = kx @ U  # G = S^* U V^T Z
    M = V.T @ kyx @ U
    model = KernelDMD("rbf", length_scale=1.0, rank=r, ridge=lam).fit((X, Y))
    ev, vl, vr = scipy.linalg.eig(M, left=True, right=True)
    order = np.argsort(-np.abs(ev))
    ev, vl, vr = ev[order], vl[:, order], vr[:, order]
    np.testing.assert_allclose(model.eig(), ev, atol=1e-9)
    xt = np.linspace(-2.5, 2.5, 13)[:, None]
    F = np.cos(Y)
    for t in (1, 3):
        direct = k(xt, X) @ U @ np.linalg.matrix_power(M, t - 1) @ V.T @ F / n
        np.testing.assert_allclose(model.predict(xt, t=t, observable=F), direct, atol=1e-7)
    # eigenfunctions: right k(x, X) U v_i, left k(x, Y) V w_i, up to one factor per pair
    for side, ref in (("right", k(xt, X) @ U @ vr), ("left", (k(xt, Y) @ V @ vl).conj())):
        ratio = model.eigenfunctions(xt, side=side) / ref
        np.testing.assert_allclose(ratio, ratio[:1].repeat(len(xt), 0), rtol=1e-6)
    # right eigenfunctions have unit empirical norm
    phi = model.eigenfunctions(X)
    np.testing.assert_allclose(np.mean(np.abs(phi) ** 2, axis=0), 1.0, rtol=1e-10)


@pytest.mark.parametrize(("estimator", "rank"), [("krr", None), ("pcr", 5), ("rrr", 5)])
def test_nystrom_with_all_centres_equals_exact(ou_pairs, estimator: str, rank) -> None:
    X, Y = ou_pairs
    kw = dict(length_scale=1.0, ridge=1e-4, estimator=estimator, rank=rank)
    exact = KernelDMD("rbf", **kw).fit((X, Y))
    nys = NystromKernelDMD("rbf", n_centers=None, **kw).fit((X, Y))
    assert nys.centres_.shape == (2 * len(X), 1)
    xt = np.linspace(-2.5, 2.5, 13)[:, None]
    p_exact, p_nys = exact.predict(xt, t=[1, 2, 5]), nys.predict(xt, t=[1, 2, 5])
    np.testing.assert_allclose(p_nys, p_exact, rtol=0, atol=1e-8 * np.abs(p_exact).max())
    np.testing.assert_allclose(nys.eig()[:5], exact.eig()[:5], atol=1e-8)
    np.testing.assert_allclose(
        mode_products(nys, xt, xt)[..., :3], mode_products(exact, xt, xt)[..., :3], atol=1e-8
    )


def test_nystrom_memory_is_n_times_m() -> None:
    traj = OrnsteinUhlenbeck(dt=0.1).sample(1501, seed=4)
    shapes: list[tuple[int, int]] = []
    base = Kernel("rbf", 1.0)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        shapes.append((a.shape[0], b.shape[0]))
        return base(a, b)

    m = 100
    model = NystromKernelDMD(kernel, n_centers=m, rank=4, ridge=1e-6, seed=0).fit(traj)
    assert max(a * b for a, b in shapes) <= 1500 * m
    assert all(m in s for s in shapes)
    true = OrnsteinUhlenbeck(dt=0.1).eigvals(4)
    ev = np.sort(model.eig().real)[::-1]
    assert np.all(np.abs(ev[:2] - true[:2]) / true[:2] < 0.05)


def test_rbf_kernel_dmd_recovers_ou_eigenvalues() -> None:
    """Leading eigenvalues e^{-k dt}, k = 1..3, within 5% (nearly independent pairs: every
    40th step of one trajectory; 10/10 seeds pass at this setting, max error 3.5%)."""
    ou = OrnsteinUhlenbeck(dt=0.05)
    traj = ou.sample(40 * 1000 + 1, seed=0)
    model = KernelDMD("rbf", length_scale=1.5, rank=4, ridge=1e-6).fit((traj[:-1:40], traj[1::40]))
    ev = model.eig()
    assert np.allclose(ev.imag, 0.0)
    ev = np.sort(ev.real)[::-1]
    true = ou.eigvals(4)
    assert abs(ev[0] - 1.0) < 0.01
    np.testing.assert_array_less(np.abs(ev[1:4] - true[1:4]) / true[1:4], 0.05)


def test_kernel_names_and_sklearn_message(monkeypatch) -> None:
    a = np.random.default_rng(0).normal(size=(4, 2))
    b = a[:3]
    d2 = ((a[:, None] - b[None]) ** 2).sum(-1)
    np.testing.assert_allclose(Kernel("rbf", 2.0)(a, b), np.exp(-d2 / 8.0))
    d1 = np.abs(a[:, None] - b[None]).sum(-1)
    np.testing.assert_allclose(Kernel("laplacian", 0.5)(a, b), np.exp(-d1 / 0.5))
    np.testing.assert_allclose(Kernel("absexp", 0.5)(a, b), np.exp(-np.sqrt(d2) / 0.5))
    np.testing.assert_allclose(
        Kernel("absexp", 0.5)(a[:, :1], b[:, :1]), Kernel("laplacian", 0.5)(a[:, :1], b[:, :1])
    )
    np.testing.assert_allclose(Kernel("poly", 1.0)(a, b), (a @ b.T + 1.0) ** 3)
    monkeypatch.setitem(__import__("sys").modules, "sklearn.metrics", None)
    with pytest.raises(ImportError, match=r"dpnets\[kernels\]"):
        Kernel("rbf")(a, b)
    np.testing.assert_allclose(Kernel("linear")(a, b), a @ b.T)  # no scikit-learn needed


# --------------------------------------------------------------------------- VAMPNets
def test_vampnet_is_dpnet_vamp2_with_separate_lobes() -> None:
    ou = OrnsteinUhlenbeck(dt=0.1)
    traj = ou.sample(4000, seed=0)
    enc = MLP(1, (16, 16), 2, activation="tanh")
    kw = dict(epochs=30, batch_size=512, lr=3e-3, seed=0, progress=False, device="cpu")
    net = VAMPNet(enc, **kw).fit(traj)
    assert net.lagged_encoder is None and net.gamma == 0.0 and net.objective == "vamp2"
    assert net.lagged_encoder_ is not None and net.lagged_encoder_ is not net.encoder_
    x = traj[:200]
    # the two lobes start from the same weights (Mardt et al.) and are trained separately:
    # with a vanishing learning rate they still agree, after training they differ
    still = VAMPNet(enc, **{**kw, "lr": 1e-12, "epochs": 1}).fit(traj)
    np.testing.assert_allclose(still.transform(x), still.transform(x, lagged=True), atol=1e-6)
    assert not np.allclose(net.transform(x), net.transform(x, lagged=True), atol=1e-3)
    # it is the DPNet objective "vamp2" without penalty: the same training score
    ref = DPNet(enc, objective="vamp2", gamma=0.0, **kw).fit(traj)
    assert net.evaluate(x) == pytest.approx(ref.evaluate(x, objective="vamp2"), abs=0.05)
    # VAMP-2 <= 1 + sum of the two leading squared singular values (Thm 1); OU is self-adjoint
    optimum = 1.0 + np.sum(ou.eigvals(3)[1:] ** 2)
    score = net.evaluate(ou.sample(20000, seed=9))
    assert optimum - 0.1 < score < optimum + 0.02
    with pytest.raises(ValueError, match="objective must be one of 'vamp1', 'vamp2'"):
        VAMPNet(enc, objective="relaxed").fit(traj)


# --------------------------------------------------------------------------- autoencoders
def test_consistency_penalty_matches_block_sum() -> None:
    g = torch.Generator().manual_seed(0)
    k, d = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    expected = sum(
        (((d[:j] @ k[:, :j]) - torch.eye(j)) ** 2).sum() / (2 * j)
        + (((k[:j] @ d[:, :j]) - torch.eye(j)) ** 2).sum() / (2 * j)
        for j in range(1, 5)
    )
    torch.testing.assert_close(consistency_penalty(k, d), expected)
    q = torch.linalg.qr(k)[0]
    assert float(consistency_penalty(q, q.T)) < 1e-10


@pytest.fixture(scope="module")
def forecast_setup(lgs: LinearGaussian, traj: np.ndarray):
    test = lgs.sample(1000, seed=1)
    ts = [1, 3, 5]
    x0 = test[: -max(ts)]

    def mse(pred: np.ndarray) -> float:
        return float(
            np.mean(
                [
                    np.mean((pred[k] - test[t : len(test) - max(ts) + t]) ** 2)
                    for k, t in enumerate(ts)
                ]
            )
        )

    baseline = mse(TransferOperator(None).fit(traj).predict(x0, t=ts))
    assert mse(np.zeros((len(ts), *x0.shape))) > 2.5 * baseline  # the 2x bound is informative
    return x0, ts, mse, baseline


def _autoencoder(cls, **kw):
    return cls(
        MLP(2, (32,), 4, activation="tanh"),
        MLP(4, (32,), 2, activation="tanh"),
        n_steps=5,
        epochs=30,
        lr=3e-3,
        batch_size=128,
        seed=0,
        progress=False,
        device="cpu",
        **kw,
    )


@pytest.mark.parametrize("cls", [DynamicAutoencoder, ConsistentAutoencoder])
def test_autoencoders_forecast_linear_system(cls, lgs, traj, forecast_setup, tmp_path) -> None:
    x0, ts, mse, baseline = forecast_setup
    ae = _autoencoder(cls).fit(traj)
    pred = ae.predict(x0, t=ts)
    assert pred.shape == (3, *x0.shape) and pred.dtype == np.float64
    assert mse(pred) < 2.0 * baseline
    if cls is DynamicAutoencoder:  # the consistent AE sometimes settles on other latent modes
        assert match_error(ae.eig(), lgs.eigvals()) < 0.05
    np.testing.assert_allclose(np.sort_complex(ae.eig()), np.sort_complex(np.linalg.eigvals(ae.K_)))
    assert len(ae.history_["train_score"]) == 30 and ae.best_epoch_ is not None
    assert ae.transform(x0).shape == (len(x0), 4)
    lam = ae.eig()
    stable = np.abs(lam) < 1  # inf for |lambda| = 1, nan (a growing mode) above 1 + 1e-6
    its = ae.implied_timescales()
    np.testing.assert_allclose(its[stable], -1.0 / np.log(np.abs(lam[stable])))
    grows = np.abs(lam) > 1 + 1e-6
    assert np.all(np.isnan(its[grows])) and np.all(np.isinf(its[~stable & ~grows]))
    # eigenfunctions enc(x)^T r_i evolve by lambda_i: E[phi(X_1)] ~ lambda phi(x)
    phi = ae.eigenfunctions(traj[:-1])[:, :4]
    phi1 = ae.eigenfunctions(traj[1:])[:, :4]
    # exactly in the latent space: enc(x) K^T r_i = lambda_i enc(x) r_i
    np.testing.assert_allclose(
        phi @ np.diag(lam[:4]),
        (ae.transform(traj[:-1]) @ ae.K_.T) @ ae.right_eigvecs_[:, :4],
        atol=1e-8,
    )
    # and on the data: for the modes that match the system's eigenvalues, the least-squares
    # slope of phi_i(X_1) on phi_i(X_0) is lambda_i (the encoder linearises the dynamics)
    slope = np.einsum("ni,ni->i", phi.conj(), phi1) / np.einsum("ni,ni->i", phi.conj(), phi)
    matched = [int(np.argmin(np.abs(lam[:4] - mu))) for mu in lgs.eigvals()]
    np.testing.assert_allclose(slope[matched], lam[matched], atol=0.03)
    # save/load round trip
    path = tmp_path / "ae.pt"
    ae.save(path)
    back = dpnets.load(path)
    assert type(back) is cls
    np.testing.assert_array_equal(back.predict(x0, t=ts), pred)
    np.testing.assert_array_equal(back.eig(), ae.eig())


# --------------------------------------------------------------------------- save / load
def _fitted_operators(traj: np.ndarray):
    return [
        DMD().fit(traj),
        DMD(rank=1).fit(traj),
        EDMD("chebyshev", degree=3).fit(traj),
        EDMD("monomial", degree=2, ridge=1e-6).fit(traj),
        KernelDMD("rbf", rank=3).fit(traj[:300]),
        KernelDMD("poly", estimator="pcr", rank=4, length_scale=2.0).fit(
            [traj[:150], traj[150:300]]
        ),
        NystromKernelDMD("laplacian", n_centers=50, rank=3, seed=1).fit(traj[:300]),
    ]


def test_save_load_round_trips(traj: np.ndarray, tmp_path) -> None:
    x = traj[500:520]
    for k, model in enumerate(_fitted_operators(traj)):
        path = tmp_path / f"m{k}.pt"
        model.save(path)
        back = dpnets.load(path)
        assert type(back) is type(model)
        np.testing.assert_array_equal(back.eig(), model.eig())
        np.testing.assert_array_equal(back.predict(x, t=[1, 2]), model.predict(x, t=[1, 2]))
        for side in ("right", "left"):
            np.testing.assert_array_equal(
                back.eigenfunctions(x, side), model.eigenfunctions(x, side)
            )
        np.testing.assert_array_equal(back.modes(), model.modes())


def test_save_load_custom_callables(traj: np.ndarray, tmp_path) -> None:
    def dictionary(s):
        return np.c_[np.ones(len(s)), s, s**2]

    def kernel(a, b):
        return (a @ b.T + 1.0) ** 2

    x = traj[:10]
    models = (EDMD(dictionary).fit(traj), KernelDMD(kernel, rank=3).fit(traj[:200]))
    for model, what, keyword in zip(
        models, ("feature map", "kernel"), ("features=...", "features=kernel"), strict=True
    ):
        with pytest.warns(UserWarning) as rec:  # said at save, not only at load
            model.save(tmp_path / "c.pt")
        assert [str(w.message) for w in rec if "saved without" in str(w.message)] == [
            f"{tmp_path / 'c.pt'}: saved without the model's custom {what} (a Python callable, "
            "which a file does not store: loading never executes code); load it with "
            f"dpnets.load(path, {keyword})"
        ]
        with pytest.raises(ValueError, match="features="):
            dpnets.load(tmp_path / "c.pt")
        back = dpnets.load(
            tmp_path / "c.pt", features=model.dictionary if isinstance(model, EDMD) else kernel
        )
        np.testing.assert_array_equal(back.predict(x, t=2), model.predict(x, t=2))


def test_vampnet_save_load(tmp_path) -> None:
    traj = OrnsteinUhlenbeck(dt=0.1).sample(600, seed=0)
    net = VAMPNet(MLP(1, (8,), 2), epochs=2, batch_size=128, seed=0, progress=False, device="cpu")
    net.fit(traj)
    net.save(tmp_path / "v.pt")
    back = dpnets.load(tmp_path / "v.pt")
    assert type(back) is VAMPNet
    np.testing.assert_array_equal(back.transform(traj), net.transform(traj))
    np.testing.assert_array_equal(
        back.transform(traj, lagged=True), net.transform(traj, lagged=True)
    )
    assert back.history_ == net.history_


# --------------------------------------------------------------------------- validation
def test_bad_input_raises_clear_errors(traj: np.ndarray) -> None:
    bad = traj.copy()
    bad[3, 0] = np.nan
    for model in (DMD(rank=1), EDMD(), KernelDMD("linear", rank=1), NystromKernelDMD("linear")):
        with pytest.raises(ValueError, match="NaN"):
            model.fit(bad)
        with pytest.raises(NotFittedError):
            model.eig()
    with pytest.raises(ValueError, match="rank"):
        DMD(rank=5).fit(traj)
    with pytest.raises(ValueError, match="rank"):
        KernelDMD("linear", rank=0).fit(traj)
    with pytest.raises(ValueError, match="krr"):
        KernelDMD("linear", rank=2, estimator="krr").fit(traj)
    with pytest.raises(ValueError, match="estimator"):
        KernelDMD("linear", estimator="svd").fit(traj)
    with pytest.raises(ValueError, match="unknown kernel"):
        KernelDMD("gauss").fit(traj)
    with pytest.raises(ValueError, match="Gram"):
        KernelDMD(lambda a, b: np.ones((len(a), 2)), rank=1).fit(traj[:50])
    with pytest.raises(ValueError, match="dictionary"):
        EDMD("fourier").fit(traj)
    with pytest.raises(ValueError, match="n_centers"):
        NystromKernelDMD("linear", n_centers=0).fit(traj)
    with pytest.raises(TypeError, match="in-memory"):
        KernelDMD().fit(torch.utils.data.TensorDataset(torch.zeros(4, 1), torch.zeros(4, 1)))
    with pytest.raises(ValueError, match="X has 3 features, but KernelDMD is expecting 2 features"):
        KernelDMD("linear", rank=1).fit(traj[:100]).predict(np.zeros((2, 3)))
    with pytest.raises(UserWarning, match="numerical rank"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            KernelDMD("linear", rank=3).fit(traj[:100])
    ae = _autoencoder(DynamicAutoencoder, val_fraction=0.0)
    with pytest.raises(ValueError, match="n_steps"):
        ae.fit((traj[:-1], traj[1:]))
    with pytest.raises(ValueError, match="lag"):
        ae.fit(traj[:5])
    with pytest.raises(NotFittedError):
        ae.predict(traj[:3])
    wrong = DynamicAutoencoder(MLP(2, (8,), 3), MLP(3, (8,), 5), epochs=1, progress=False)
    with pytest.raises(ValueError, match="decoder"):
        wrong.fit(traj[:100])
    with pytest.raises(ValueError, match="prediction_weight"):
        DynamicAutoencoder(MLP(2, (8,), 3), MLP(3, (8,), 2), prediction_weight=-1).fit(traj)

"""Continuous-time DPNets: Itô derivatives, generator score, Generator, Langevin reference.

Ground truth: the Ornstein-Uhlenbeck generator (eigenvalues -k theta, Hermite eigenfunctions,
exact Gauss-Hermite quadrature for polynomial expectations) and a finite-difference reference
for the four-well Langevin generator, checked against OU and under grid refinement.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from numpy.polynomial import hermite_e

import dpnets
from dpnets import DPNet, Generator, NotFittedError
from dpnets.ito import (
    SDE,
    _fwd_jvp2,
    _rev_jvp2,
    diffusion_columns,
    diffusion_jacobian,
    ito_derivative,
    overdamped_langevin,
)
from dpnets.nn import MLP
from dpnets.scores import (
    GeneratorLoss,
    covariances,
    dirichlet_score,
    generator_score,
    metric_distortion,
)
from dpnets.systems import FourWellLangevin, OrnsteinUhlenbeck, OverdampedLangevin1D

F64 = torch.float64


def ou_sde(theta: float = 1.0, sigma: float = math.sqrt(2.0), mu: float = 0.0) -> SDE:
    return SDE(lambda x: -theta * (x - mu), sigma, reversible=True, name="OU")


def hermite_features(r: int, s: float = 1.0):
    """Normalised probabilists' Hermite polynomials He_k(x/s)/sqrt(k!), k < r (torch)."""

    def psi(x: torch.Tensor) -> torch.Tensor:
        z = x[:, 0] / s
        cols = [torch.ones_like(z), z]
        for k in range(1, r - 1):
            cols.append(z * cols[k] - k * cols[k - 1])
        return torch.stack(
            [c / math.sqrt(math.factorial(k)) for k, c in enumerate(cols[:r])], dim=1
        )

    return psi


def gauss_hermite(n: int = 40):
    """Nodes and weights integrating polynomials of degree < 2n exactly against N(0, 1)."""
    x, w = hermite_e.hermegauss(n)
    return torch.tensor(x, dtype=F64)[:, None], torch.tensor(w / w.sum(), dtype=F64)


# ------------------------------------------------------------------------ Itô derivative


def test_ito_derivative_exact_on_polynomials():
    theta, sigma, mu = 0.7, 1.3, 0.4
    x = torch.linspace(-3, 3, 25, dtype=F64)[:, None]
    psi, dpsi = ito_derivative(
        lambda y: torch.cat([y**k for k in range(5)], dim=1), x, ou_sde(theta, sigma, mu)
    )
    xv = x[:, 0]
    expected = torch.stack(
        [
            -theta * k * xv ** (k - 1) * (xv - mu) + 0.5 * sigma**2 * k * (k - 1) * xv ** (k - 2)
            if k >= 2
            else (-theta * (xv - mu) if k == 1 else torch.zeros_like(xv))
            for k in range(5)
        ],
        dim=1,
    )
    torch.testing.assert_close(psi, torch.cat([x**k for k in range(5)], dim=1))
    torch.testing.assert_close(dpsi, expected, rtol=1e-12, atol=1e-12)


def test_ito_derivative_doctest_value():
    x = torch.tensor([[0.0], [1.0], [2.0]], dtype=F64)
    _, d = ito_derivative(lambda y: y**2, x, lambda y: -y, 2**0.5)
    assert d.ravel().tolist() == pytest.approx([2.0, 0.0, -6.0], abs=1e-12)


def test_ito_derivative_scalar_state_diffusions():
    """d = 1: B given as (n,), (n, 1) or (n, 1, m) (several noises acting on one state)."""
    x = torch.linspace(-1, 1, 5, dtype=F64)[:, None]
    xv = x[:, 0]
    expected = -2 * xv**2 + (1 + xv**2) ** 2  # psi = x^2, A = -x, B = 1 + x^2
    for diffusion in (
        lambda y: 1 + y[:, 0] ** 2,
        lambda y: 1 + y**2,
        lambda y: torch.stack([(1 + y**2) * 0.6, (1 + y**2) * 0.8], dim=-1),
    ):
        _, d = ito_derivative(lambda y: y**2, x, lambda y: -y, diffusion)
        torch.testing.assert_close(d[:, 0], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["scalar", "diag", "full", "constant"])
def test_ito_derivative_matches_explicit_hessian(kind):
    torch.manual_seed(1)
    d, m, r, n = 3, 2, 4, 6
    net = MLP(d, (16, 16), r, activation="tanh").to(F64)
    x = torch.randn(n, d, dtype=F64)
    mat = torch.randn(d, d, m, dtype=F64)

    def drift(y):
        return torch.sin(y) - y**3

    diffusion = {
        "scalar": 0.8,
        "diag": lambda y: 1.0 + y**2,
        "full": lambda y: torch.einsum("ni,ijk->njk", torch.cos(y), mat) + 0.3,
        "constant": torch.randn(d, m, dtype=F64),
    }[kind]
    psi, dpsi = ito_derivative(net, x, drift, diffusion)
    b = diffusion_columns(diffusion, x)
    expected = []
    for i in range(n):
        xi = x[i]
        jac = torch.func.jacrev(lambda z: net(z[None])[0])(xi)  # (r, d)
        hess = torch.func.hessian(lambda z: net(z[None])[0])(xi)  # (r, d, d)
        bi = b[i]
        expected.append(jac @ drift(xi[None])[0] + 0.5 * torch.einsum("dk,rde,ek->r", bi, hess, bi))
    torch.testing.assert_close(psi, net(x))
    torch.testing.assert_close(dpsi, torch.stack(expected).detach(), rtol=1e-10, atol=1e-10)
    # Dirichlet-form ingredients: grad psi^T B
    _, jac_b = diffusion_jacobian(net, x, diffusion)
    ref = torch.stack([torch.func.jacrev(lambda z: net(z[None])[0])(x[i]) @ b[i] for i in range(n)])
    torch.testing.assert_close(jac_b, ref.detach(), rtol=1e-10, atol=1e-10)


def test_reverse_mode_fallback_matches_forward_mode():
    torch.manual_seed(2)
    net = MLP(2, (8,), 3, activation="silu").to(F64)
    x, v = torch.randn(5, 2, dtype=F64), torch.randn(5, 2, dtype=F64)
    for a, b in zip(_fwd_jvp2(net, x, v), _rev_jvp2(net, x, v), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # silu has no second-order forward-mode formula under no_grad: the fallback handles it
    with torch.no_grad():
        _, d = ito_derivative(net, x, lambda y: -y, 1.0)
    assert not d.requires_grad and torch.isfinite(d).all()


def test_ito_derivative_is_differentiable_in_parameters():
    torch.manual_seed(3)
    net = MLP(1, (8,), 2, activation="celu")
    _, d = ito_derivative(net, torch.randn(32, 1), lambda y: -y, 1.0)
    d.pow(2).mean().backward()
    grads = {name: p.grad for name, p in net.named_parameters()}
    last_bias = list(grads)[-1]
    assert grads.pop(last_bias) is None  # d psi does not depend on the output bias
    assert all(
        g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads.values()
    )


def test_overdamped_langevin_sde():
    kT, friction = 0.5, 2.0
    s1 = overdamped_langevin(lambda x: (x**4).sum(-1), kT=kT, friction=friction)
    s2 = overdamped_langevin(grad_potential=lambda x: 4 * x**3, kT=kT, friction=friction)
    x = torch.randn(7, 2, dtype=F64)
    torch.testing.assert_close(s1.drift(x), -4 * x**3 / friction)
    torch.testing.assert_close(s2.drift(x), -4 * x**3 / friction)
    assert s1.reversible and s1.diffusion == pytest.approx(math.sqrt(2 * kT / friction))
    with pytest.raises(ValueError, match="exactly one"):
        overdamped_langevin()
    with pytest.raises(ValueError, match="kT and friction"):
        overdamped_langevin(grad_potential=lambda x: x, kT=-1.0)


def test_ito_derivative_validation():
    x = torch.randn(4, 2, dtype=F64)
    with pytest.raises(ValueError, match="diffusion"):
        ito_derivative(lambda y: y, x, lambda y: -y, lambda y: torch.ones(4, 5))
    with pytest.raises(ValueError, match="drift"):
        ito_derivative(lambda y: y, x, lambda y: y[:, :1], 1.0)
    with pytest.raises(ValueError, match="shape \\(n, r\\)"):
        ito_derivative(lambda y: y[:, 0], x, lambda y: -y, 1.0)
    with pytest.raises(TypeError, match="floating"):
        ito_derivative(lambda y: y, torch.ones(3, 1, dtype=torch.long), lambda y: -y, 1.0)
    with pytest.raises(ValueError, match="not both"):
        ito_derivative(lambda y: y, x, ou_sde(), 1.0)


# ------------------------------------------------------------------------ scores


def test_generator_score_of_hermite_features_is_sum_of_eigenvalues():
    """Lpsi = psi diag(-k) pointwise, so tr(Cx^+ C_d) = -sum k on *any* sample."""
    r = 5
    x = torch.tensor(np.random.default_rng(0).standard_normal((500, 1)))
    psi, dpsi = ito_derivative(hermite_features(r), x, ou_sde())
    assert float(generator_score(psi, dpsi)) == pytest.approx(-sum(range(r)), abs=1e-9)
    gamma = 3.0
    cx = covariances(psi)[0]
    # gamma on the scale of the discrete scores: R averaged over the r eigenvalues
    expected = -sum(range(r)) - gamma / r * float(metric_distortion(cx))
    assert float(generator_score(psi, dpsi, gamma)) == pytest.approx(expected, abs=1e-8)
    loss = GeneratorLoss(gamma)(psi, dpsi)
    assert float(loss) == pytest.approx(-expected, abs=1e-8)
    # theta scales the spectrum: OU with theta = 2 (stationary N(0, 1) with sigma = 2)
    psi2, dpsi2 = ito_derivative(hermite_features(r), x, ou_sde(theta=2.0, sigma=2.0))
    assert float(generator_score(psi2, dpsi2)) == pytest.approx(-2 * sum(range(r)), abs=1e-9)


def test_generator_score_upper_bound_and_quadrature():
    """Thm. 2: P_d^0 <= lambda_0 + ... + lambda_{r-1}; exact expectations by quadrature."""
    x, w = gauss_hermite()
    sde = ou_sde()
    # span{1, x, x^3}: Ritz values 0, -1, -3 (x^3 = He_3 + 3 He_1) -> -4 <= -3
    psi, dpsi = ito_derivative(lambda y: torch.cat([y**0, y, y**3], 1), x, sde)
    assert float(generator_score(psi, dpsi, weights=w)) == pytest.approx(-4.0, abs=1e-9)
    # random polynomial features of degree <= 4 never beat the bound
    rng = np.random.default_rng(1)
    monomials = torch.cat([x**k for k in range(5)], 1)
    for _ in range(5):
        coef = torch.tensor(rng.standard_normal((5, 3)))
        psi, dpsi = ito_derivative(
            lambda y, c=coef: torch.cat([y**k for k in range(5)], 1) @ c, x, sde
        )
        torch.testing.assert_close(psi, monomials @ coef)
        assert float(generator_score(psi, dpsi, weights=w)) <= -3.0 + 1e-9


def test_dirichlet_form_agrees_with_ito_form():
    """-E[psi (L psi)^T] = 1/2 E[grad psi B B^T grad psi^T] for reversible diffusions."""
    # OU, exact Gauss-Hermite quadrature on random polynomial features
    x, w = gauss_hermite()
    coef = torch.tensor(np.random.default_rng(2).standard_normal((5, 4)))

    def feats(y):
        return torch.cat([y**k for k in range(5)], dim=1) @ coef

    psi, dpsi = ito_derivative(feats, x, ou_sde())
    _, jac = diffusion_jacobian(feats, x, ou_sde())
    for gamma in (0.0, 2.0):
        a = float(generator_score(psi, dpsi, gamma, weights=w))
        b = float(dirichlet_score(psi, jac, gamma, weights=w))
        assert a == pytest.approx(b, rel=1e-10)
    # four-well Langevin, MLP features, Boltzmann-weighted grid quadrature
    system = FourWellLangevin()
    grid = np.linspace(-1.5, 1.5, 6001)
    wq = torch.tensor(system.stationary_density(grid))
    xg = torch.tensor(grid)[:, None]
    torch.manual_seed(0)
    net = MLP(1, (16, 16), 3, activation="celu").to(F64)
    psi, dpsi = ito_derivative(net, xg, system.sde())
    _, jac = diffusion_jacobian(net, xg, system.sde())
    a = float(generator_score(psi, dpsi, weights=wq))
    b = float(dirichlet_score(psi, jac, weights=wq))
    assert a == pytest.approx(b, rel=1e-4)
    assert float(GeneratorLoss(form="dirichlet")(psi, jac)) == pytest.approx(
        -float(dirichlet_score(psi, jac)), rel=1e-12
    )


def test_generator_score_gradient_finite_at_degenerate_covariance():
    x, w = gauss_hermite()
    scale = torch.ones(4, dtype=F64, requires_grad=True)
    psi, dpsi = ito_derivative(hermite_features(4), x, ou_sde())
    score = generator_score(psi * scale, dpsi * scale, 50.0, weights=w)  # Cx = I exactly
    score.backward()
    assert torch.isfinite(scale.grad).all()
    # the score is invariant to rescaling the features: only R moves, and R is minimal at Cx=I
    torch.testing.assert_close(scale.grad, torch.zeros(4, dtype=F64), atol=1e-8, rtol=0)


def test_generator_loss_validation():
    with pytest.raises(ValueError, match="form"):
        GeneratorLoss(form="hutchinson")
    with pytest.raises(ValueError, match="jac"):
        dirichlet_score(torch.zeros(5, 2), torch.zeros(5, 3, 1))


# ------------------------------------------------------------------------ Generator


def test_generator_on_hermite_features_is_exact():
    theta = 1.5
    sde = ou_sde(theta=theta, sigma=math.sqrt(2 * theta))  # stationary N(0, 1)
    x = np.random.default_rng(0).standard_normal((2000, 1))
    gen = Generator(hermite_features(4), sde).fit(x)
    np.testing.assert_allclose(gen.eig().real, -theta * np.arange(4), atol=1e-9)
    np.testing.assert_allclose(gen.eig().imag, 0.0, atol=1e-12)
    assert gen.cx_rank_ == 4 and gen.partial_trace_ == pytest.approx(-6 * theta)
    ts = gen.implied_timescales()
    assert ts[0] == np.inf
    np.testing.assert_allclose(ts[1:], 1.0 / (theta * np.arange(1, 4)), rtol=1e-9)
    # right eigenfunctions are the Hermite polynomials (up to sign), unit empirical norm
    phi = gen.eigenfunctions(x).real
    herm = OrnsteinUhlenbeck(theta=theta, sigma=math.sqrt(2 * theta)).eigfuns(x, 4)
    np.testing.assert_allclose(np.mean(phi**2, axis=0), 1.0, rtol=1e-9)
    assert np.std(phi[:, 0]) < 1e-9
    for k in range(1, 4):
        assert abs(np.corrcoef(phi[:, k], herm[:, k])[0, 1]) == pytest.approx(1.0, abs=1e-9)
    # continuous time: E[X_t | x] = x e^{-theta t}, E[X_t^2 | x] = 1 + (x^2 - 1) e^{-2 theta t}
    x0 = np.array([[-1.0], [0.5], [2.0]])
    ts_ = [0.0, 0.3, 1.7]
    pred = gen.predict(x0, ts_)
    for i, t in enumerate(ts_):
        np.testing.assert_allclose(pred[i], x0 * np.exp(-theta * t), atol=1e-9)
    pred2 = gen.predict(x0, 0.4, observable=x**2)
    np.testing.assert_allclose(pred2.ravel(), 1 + (x0.ravel() ** 2 - 1) * np.exp(-0.8 * theta))
    # the matrix-exponential path gives the same forecast
    np.testing.assert_allclose(
        gen.transform(x0) @ gen._power(0.3) @ gen.state_coef_, pred[1], atol=1e-9
    )


def test_generator_forms_and_options():
    sde = ou_sde()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20000, 1))
    psi = hermite_features(3)
    ito = Generator(psi, sde).fit(x)
    sym = Generator(psi, sde, symmetrize=True).fit(x)
    np.testing.assert_allclose(sym.cxd_, sym.cxd_.T)
    np.testing.assert_allclose(sym.eig().real, ito.eig().real, atol=1e-3)  # Cx ~ I: close
    np.testing.assert_allclose(ito.eig().real, [0.0, -1.0, -2.0], atol=1e-9)  # eigen-features
    # Dirichlet form: first derivatives only, agrees up to Monte Carlo error
    dirichlet = Generator(psi, sde, form="dirichlet").fit(x)
    np.testing.assert_allclose(dirichlet.cxd_, dirichlet.cxd_.T)
    np.testing.assert_allclose(dirichlet.eig().real, [0.0, -1.0, -2.0], atol=0.06)
    # drift/diffusion instead of an SDE object; identity features (linear: DMD-like)
    # "auto" adds the constant (eigenvalue 0) to linear features, which do not span it
    lin = Generator(None, drift=lambda y: -y, diffusion=1.0).fit(x)
    assert lin.constant_ and ito.constant_ is False  # Hermite features hold H_0 = 1
    np.testing.assert_allclose(lin.eig().real, [0.0, -1.0], atol=1e-12)
    lin0 = Generator(None, drift=lambda y: -y, diffusion=1.0, constant=False).fit(x)
    np.testing.assert_allclose(lin0.eig().real, [-1.0])
    # ridge: L = (Cx + rho I)^+ C_d ~ -k / (1 + rho) on (near-)orthonormal eigenfunctions
    ridge = Generator(psi, sde, ridge=0.1).fit(x)
    assert np.all(ridge.eig().real[1:] > ito.eig().real[1:])


def test_generator_validation():
    x = np.random.default_rng(0).standard_normal((50, 1))
    psi = hermite_features(3)
    with pytest.raises(NotFittedError):
        Generator(psi, ou_sde()).eig()
    with pytest.raises(ValueError, match="SDE is unknown"):
        Generator(psi).fit(x)
    with pytest.raises(ValueError, match="not both"):
        Generator(psi, ou_sde(), drift=lambda y: -y, diffusion=1.0).fit(x)
    with pytest.raises(ValueError, match="together"):
        Generator(psi, drift=lambda y: -y).fit(x)
    with pytest.raises(TypeError, match="not \\(X, Y\\) pairs"):
        Generator(psi, ou_sde()).fit((x, x))
    with pytest.raises(ValueError, match="NaN"):
        Generator(psi, ou_sde()).fit(np.full((10, 1), np.nan))
    with pytest.raises(ValueError, match="reversible"):
        Generator(psi, SDE(lambda y: -y, 1.0), form="dirichlet").fit(x)
    with pytest.raises(ValueError, match="fewer samples"):
        Generator(psi, ou_sde()).fit(x[:2])
    gen = Generator(psi, ou_sde()).fit([x[:20], x[20:]])  # list of trajectories
    assert gen.n_samples_ == 50
    for bad in (-1.0, float("nan"), "1", True):
        with pytest.raises(ValueError, match="t must be"):
            gen.predict(x[:2], bad)
    with pytest.raises(ValueError, match="X has 2 features, but Generator is expecting 1 features"):
        gen.predict(np.zeros((2, 2)), 1.0)
    with pytest.warns(UserWarning, match="piecewise-linear"):
        Generator(MLP(1, (4,), 2, activation="relu"), ou_sde()).fit(x)


def test_generator_save_load(tmp_path):
    x = np.random.default_rng(0).standard_normal((300, 1))
    psi = hermite_features(3)
    gen = Generator(psi, ou_sde()).fit(x)
    gen.save(tmp_path / "gen.pt")
    with pytest.raises(ValueError, match="custom feature map"):
        dpnets.load(tmp_path / "gen.pt")
    back = dpnets.load(tmp_path / "gen.pt", features=psi)
    assert isinstance(back, Generator) and back.sde is None
    np.testing.assert_allclose(back.eig(), gen.eig())
    np.testing.assert_allclose(back.predict(x[:4], [0.5, 2.0]), gen.predict(x[:4], [0.5, 2.0]))
    # a module feature map is rebuilt from the file
    torch.manual_seed(0)
    net = MLP(1, (8,), 3, activation="tanh")
    gm = Generator(net, ou_sde()).fit(x)
    gm.save(tmp_path / "gm.pt")
    with pytest.raises(ValueError, match="custom feature map"):
        dpnets.load(tmp_path / "gm.pt")
    back = dpnets.load(tmp_path / "gm.pt", features=net)
    np.testing.assert_allclose(back.eig(), gm.eig())


# ------------------------------------------------------------------------ DPNet generator mode


@pytest.fixture
def one_thread():
    """Small networks train fastest on one thread (and the CI machine is shared)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_dpnet_learns_ou_generator(one_thread):
    """Learned features (r = 4, and the constant) recover the OU generator eigenvalues -1..-4
    within 5%."""
    sde = ou_sde()
    x = OrnsteinUhlenbeck(theta=1.0, sigma=math.sqrt(2.0), dt=1.0).sample(20000, seed=0)
    torch.manual_seed(0)
    net = DPNet(
        MLP(1, (32, 32), 4, activation="gelu"),
        objective="generator",
        sde=sde,
        gamma=1.0,
        lr=1e-2,
        batch_size=2000,
        epochs=40,
        val_fraction=0.0,
        seed=0,
        progress=False,
    ).fit(x)
    assert np.all(np.isfinite(net.history_["train_score"]))
    lam = Generator(net).fit(x).eig()  # the SDE is taken from the DPNet
    np.testing.assert_allclose(lam.imag, 0.0, atol=1e-6)
    np.testing.assert_allclose(lam.real[1:], [-1.0, -2.0, -3.0, -4.0], rtol=0.05)
    assert abs(lam.real[0]) < 1e-10  # the added constant: exactly stationary
    # the learned (gamma-penalised) score of [1, psi] on fresh samples approaches the bound
    # 0 - 1 - 2 - 3 - 4 = -10 (Thm. 2)
    fresh = np.random.default_rng(9).standard_normal((20000, 1))
    assert -10.6 < net.evaluate(fresh) < -10.0 + 0.05


def test_dpnet_generator_mode_dirichlet_validation_and_io(tmp_path):
    sde = ou_sde()
    x = np.random.default_rng(0).standard_normal((600, 1))
    net = DPNet(
        MLP(1, (8,), 3, activation="tanh"),
        objective="dirichlet",
        sde=sde,
        epochs=3,
        batch_size=200,
        seed=0,
        progress=False,
        device="cpu",  # load() maps to the CPU: compare on one device
    ).fit(x)
    assert net.lag_ is None and net.n_features_ == 3 and len(net.history_["val_score"]) == 3
    assert np.isfinite(net.evaluate(x))
    net.save(tmp_path / "net.pt")
    with pytest.raises(ValueError, match=r"trained with an SDE.*load\(path, sde=\.\.\.\)"):
        dpnets.load(tmp_path / "net.pt")  # the SDE (callables) is not stored: asked for
    back = dpnets.load(tmp_path / "net.pt", sde=sde)
    assert back.sde is sde and back.objective == "dirichlet"
    np.testing.assert_allclose(back.transform(x[:5]), net.transform(x[:5]), rtol=1e-6)
    assert np.isfinite(back.evaluate(x))
    gen = Generator(net).fit(x)  # the SDE comes from the DPNet
    gen.save(tmp_path / "gen.pt")
    gback = dpnets.load(tmp_path / "gen.pt", sde=None)  # the DPNet feature map is stored too
    assert isinstance(gback.features, DPNet) and gback.sde is None
    np.testing.assert_allclose(gback.eig(), gen.eig(), rtol=1e-12)
    np.testing.assert_allclose(gback.predict(x[:3], 0.7), gen.predict(x[:3], 0.7), rtol=1e-6)
    with pytest.raises(ValueError, match="needs sde"):
        DPNet(MLP(1, (4,), 2), objective="generator", epochs=1, progress=False).fit(x)
    with pytest.raises(ValueError, match="reversible"):
        DPNet(
            MLP(1, (4,), 2), objective="dirichlet", sde=SDE(lambda y: -y, 1.0), progress=False
        ).fit(x)
    with pytest.raises(ValueError, match="lagged_encoder"):
        DPNet(MLP(1, (4,), 2), lagged_encoder=MLP(1, (4,), 2), objective="generator", sde=sde).fit(
            x
        )
    with pytest.raises(TypeError, match="not \\(X, Y\\) pairs"):
        DPNet(MLP(1, (4,), 2, activation="tanh"), objective="generator", sde=sde).fit((x, x))
    with pytest.warns(UserWarning, match="piecewise-linear"):
        DPNet(
            MLP(1, (4,), 2, activation="relu"),
            objective="generator",
            sde=sde,
            epochs=1,
            progress=False,
        ).fit(x)
    with pytest.raises(ValueError, match="objective must be one of"):
        DPNet(MLP(1, (4,), 2), objective="generatr").fit(x)


# ------------------------------------------------------------------------ Langevin system


def test_langevin_reference_matches_ou():
    """V = x^2/2, kT = 1, friction = 1 is OU with theta = 1: eigenvalues -k."""
    ou = OverdampedLangevin1D(lambda x: 0.5 * x**2, lambda x: x, domain=(-12.0, 12.0))
    lam = ou.reference_eigvals(5, n_grid=4001)
    np.testing.assert_allclose(lam, -np.arange(5), atol=2e-3)
    grid = np.linspace(-3, 3, 13)
    f = ou.reference_eigfuns(grid, 3, n_grid=4001)
    np.testing.assert_allclose(np.abs(f), np.abs(OrnsteinUhlenbeck().eigfuns(grid, 3)), atol=5e-3)


def test_four_well_reference_converges_under_refinement():
    system = FourWellLangevin()
    grids = (1001, 2001, 4001, 8001)
    vals = np.array([system.reference_eigvals(5, g) for g in grids])
    diffs = np.abs(np.diff(vals[:, 1:], axis=0))  # non-zero eigenvalues
    ratios = diffs[:-1] / diffs[1:]
    np.testing.assert_allclose(ratios, 4.0, rtol=0.1)  # second order in the grid step
    assert np.all(diffs[-1] / np.abs(vals[-1, 1:]) < 2e-6)
    assert abs(vals[-1, 0]) < 1e-6  # the constant function
    np.testing.assert_allclose(
        vals[-1, 1:], [-11.98994, -78.88501, -153.6139, -820.8163], rtol=1e-6
    )
    # eigenfunctions orthonormal in L2(pi)
    _, grid, f = system.reference_spectrum(4, 8001)
    w = system.stationary_density(grid) * (grid[1] - grid[0])
    np.testing.assert_allclose((f * w[:, None]).T @ f, np.eye(4), atol=1e-6)
    its = system.implied_timescales(3)
    assert its[0] == np.inf and its[1] == pytest.approx(1 / 11.98994, rel=1e-5)


def test_four_well_galerkin_converges_to_reference():
    """Cross-check of the SDE conventions (drift, diffusion, kT, friction) and of the
    finite-difference reference: Ritz values of the Itô-derivative estimator on Chebyshev
    polynomials, with Boltzmann-weighted quadrature, approach the reference from below
    (variational principle) as the degree grows.
    """
    system = FourWellLangevin()
    ref = system.reference_eigvals(5)
    x = np.linspace(-1.5, 1.5, 3001)[:, None]
    w = system.stationary_density(x[:, 0])

    def chebyshev(deg):
        def feats(y):
            z = y / 1.5
            cols = [torch.ones_like(z), z]
            for _ in range(deg - 1):
                cols.append(2 * z * cols[-1] - cols[-2])
            return torch.cat(cols, dim=1)

        return feats

    errors = []
    for deg in (20, 40, 60):
        gen = Generator(chebyshev(deg), system.sde(), rtol=1e-12).fit(x, sample_weight=w)
        lam = gen.eig().real[:5]
        assert abs(lam[0]) < 1e-8 and np.all(lam[1:] < ref[1:] + 1e-6 * np.abs(ref[1:]))
        errors.append(np.abs(lam[1:] - ref[1:]) / np.abs(ref[1:]))
    errors = np.array(errors)
    assert np.all(np.diff(errors, axis=0) < 0)
    np.testing.assert_array_less(errors[-1], [0.015, 0.003, 0.003, 0.001])


def test_four_well_sampler():
    system = FourWellLangevin()
    X, times, chain = system.sample(3000, n_chains=300, mean_stride=20, seed=5, return_times=True)
    assert X.shape == (3000, 1) and np.all(np.isfinite(X))
    np.testing.assert_array_equal(X, system.sample(3000, n_chains=300, mean_stride=20, seed=5))
    for c in (0, 299):  # strictly increasing, geometric (non-uniform) observation times
        t = times[chain == c]
        gaps = np.round(np.diff(t) / system.dt)
        assert np.all(gaps >= 1) and len(np.unique(gaps)) > 1
    # Euler-Maruyama at dt = 1e-5 keeps the Boltzmann law: P(X > 0) from 2000 chains
    x0 = system.sample_stationary(2000, seed=1)[:, 0]
    xt = system.simulate(x0, 2000, record_every=2000, seed=2)[-1]
    grid = np.linspace(-1.5, 1.5, 20001)
    dens = system.stationary_density(grid)
    p_right = np.sum(dens[grid > 0]) * (grid[1] - grid[0])
    assert (xt > 0).mean() == pytest.approx(p_right, abs=0.035)
    with pytest.raises(ValueError, match="mean_stride"):
        system.sample(10, mean_stride=0.5)
    with pytest.raises(ValueError, match="> 0"):
        FourWellLangevin(kT=0.0)


def test_four_well_torch_and_numpy_potentials_agree():
    system = FourWellLangevin()
    x = np.linspace(-1.2, 1.2, 50)
    np.testing.assert_allclose(
        system.grad_potential(torch.tensor(x)).numpy(), system.grad_potential(x)
    )
    # V' is the derivative of V
    h = 1e-6
    np.testing.assert_allclose(
        (system.potential(x + h) - system.potential(x - h)) / (2 * h),
        system.grad_potential(x),
        rtol=1e-6,
        atol=1e-6,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sde = system.sde()
    torch.testing.assert_close(
        sde.drift(torch.tensor(x)[:, None]), -torch.tensor(system.grad_potential(x))[:, None] / 0.1
    )

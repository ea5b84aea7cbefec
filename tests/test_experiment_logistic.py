"""Tests for the logistic-map experiment (paper Table 1) and the periodic input embedding."""

from __future__ import annotations

import importlib.util
import json
import math
import re

import numpy as np
import pytest
import torch

from dpnets import DPNet, load
from dpnets.experiments import logistic_map as lmx
from dpnets.nn.embeddings import FourierEmbedding, PeriodicMLP
from dpnets.scores import metric_distortion, projection_score_from_covariances


@pytest.fixture(scope="module")
def setup() -> lmx.Setup:
    return lmx.make_setup(n_pairs=1024)


def _method(name: str) -> lmx.Method:
    return next(m for m in lmx.METHODS if m.name == name)


# ------------------------------------------------------------------ fixed rows: exact
def test_cheby_row_reproduces_paper(setup: lmx.Setup) -> None:
    res = lmx.evaluate(setup, _method("Cheby-T").build(setup, 0))
    # Paper Table 1, "Cheby-T": spectral error 0.20, optimality gap 1.24 (Lebesgue sigma).
    assert round(res["spectral_error"], 2) == 0.20
    assert round(res["optimality_gap_paper"], 2) == 1.24
    assert abs(res["spectral_error"] - 0.2020) < 1e-4
    assert abs(res["optimality_gap_paper"] - 1.2402) < 1e-4
    # Against the L^2(pi) singular values the gap is smaller (sigma_1 = 1 instead of 1.24).
    assert abs(res["optimality_gap"] - 1.1987) < 1e-4
    assert abs(res["eigvals"][0] - 1.0) < 1e-10  # constants are in the span


def test_noise_kernel_row_reproduces_paper(setup: lmx.Setup) -> None:
    res = lmx.evaluate(setup, _method("NoiseKernel").build(setup, 0))
    assert round(res["spectral_error"], 2) == 0.19
    assert round(res["optimality_gap_paper"], 2) == 2.17


def test_spectral_error_from_eigvals(setup: lmx.Setup) -> None:
    est = np.array([0.01, 1.0, 0.1j, 0.5])
    true = np.array([1.0, 0.4, 0.0])
    # leading estimates 1, 0.5, 0.1j -> nearest true 1, 0.4, 0 -> distances 0, 0.1, 0.1
    assert lmx.spectral_error_from_eigvals(est, true) == pytest.approx(0.1)
    assert lmx.spectral_error_from_eigvals(est, true, n_eigs=1) == 0.0
    # Same formula as LogisticMap.representation_metrics' spectral_error_paper.
    m = setup.system.representation_metrics(lmx.chebyshev_features)
    got = lmx.spectral_error_from_eigvals(m["eigvals"], setup.system.eigvals())
    assert got == pytest.approx(m["spectral_error_paper"], abs=1e-12)


def test_paper_gamma_is_kooplearn_convention() -> None:
    # kooplearn: score - 0.5 * gamma_k * (mean f(eig Cx) + mean f(eig Cy)), f = l^2 - l - ln l,
    # with gamma_k = 1 in the paper; ours: score - gamma * (R(Cx) + R(Cy)) / (2r), R = trace.
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(lmx.RANK, lmx.RANK, generator=gen, dtype=torch.float64)
    b = torch.randn(lmx.RANK, lmx.RANK, generator=gen, dtype=torch.float64)
    cx, cy = a @ a.T / 7 + 0.1 * torch.eye(7), b @ b.T / 7 + 0.1 * torch.eye(7)

    def f_mean(c: torch.Tensor) -> float:
        ev = torch.linalg.eigvalsh(c)
        return float(torch.mean(ev**2 - ev - torch.log(ev)))

    kooplearn = 0.5 * 1.0 * (f_mean(cx) + f_mean(cy))
    assert lmx.PAPER_GAMMA == 1.0
    cxy = 0.3 * cx
    penalty = float(
        projection_score_from_covariances(cx, cy, cxy, 0.0)
        - projection_score_from_covariances(cx, cy, cxy, lmx.PAPER_GAMMA)
    )
    assert penalty == pytest.approx(kooplearn, rel=1e-12)
    assert float(metric_distortion(cx)) == pytest.approx(7 * f_mean(cx), rel=1e-12)  # a trace


# ------------------------------------------------------------------ end to end
def test_run_tiny_end_to_end(tmp_path) -> None:
    table = lmx.run(seeds=1, epochs=2, n_pairs=512, out=tmp_path, progress=False)
    lines = [ln for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln]
    names = [ln.split("|")[1].strip() for ln in lines[1:]]
    assert names == [m.name for m in lmx.METHODS]
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.split("|")[2:-1]]
        ours = [cells[0], cells[2], cells[4], cells[5], cells[6]]
        for cell in ours:
            value = float(re.match(r"-?\d+\.\d+", cell).group())
            assert math.isfinite(value)
    for name in ("table.md", "results.json", "results.csv"):
        assert (tmp_path / name).is_file()
    payload = json.loads((tmp_path / "results.json").read_text())
    assert set(payload["per_seed"]) == {m.name for m in lmx.METHODS}
    for rows in payload["per_seed"].values():
        assert len(rows) == 1
        assert all(math.isfinite(rows[0][k]) for k in ("spectral_error", "optimality_gap_paper"))
    # The fixed rows do not depend on the (tiny) training settings.
    assert payload["summary"]["Cheby-T"]["spectral_error"][0] == pytest.approx(0.2020, abs=1e-4)
    curve = payload["curves"]["DPNets"][0]
    assert [p[0] for p in curve] == [0, 1, 2]  # init + every epoch
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 1 + len(lmx.METHODS)
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "spectral_error_vs_epoch.png").stat().st_size > 0


def test_run_rejects_unknown_method(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown methods"):
        lmx.run(methods=["DMD"], out=tmp_path, progress=False)


# ------------------------------------------------------------------ embeddings
def test_fourier_embedding_values() -> None:
    x = torch.tensor([[0.0], [0.25], [0.5]], dtype=torch.float64)
    out = FourierEmbedding(1, n_harmonics=2)(x)
    expected = torch.tensor(
        [[0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, -1.0], [0.0, 0.0, -1.0, 1.0]], dtype=torch.float64
    )
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    with pytest.raises(ValueError):
        FourierEmbedding(1, period=0.0)


def test_periodic_mlp_paper_init_and_periodicity() -> None:
    torch.manual_seed(0)
    net = PeriodicMLP(1, (64, 128, 64), 7, hidden_bias=False, init="paper")
    linears = [m for m in net.net if isinstance(m, torch.nn.Linear)]
    assert [lin.bias is None for lin in linears] == [True, True, True, False]
    assert linears[0].weight.abs().max() <= 1.0 and linears[0].weight.abs().max() > 0.9
    bound = math.sqrt(3.0 / 128)  # Kaiming-uniform with gain 1, fan_in 128
    assert linears[2].weight.abs().max() <= bound
    assert torch.all(linears[-1].bias == 0)
    x = torch.rand(32, 1)
    torch.testing.assert_close(net(x), net(x + 1.0), atol=1e-5, rtol=1e-5)


def test_dpnet_with_periodic_encoder_save_load(tmp_path) -> None:
    torch.manual_seed(0)
    traj = lmx.make_setup(n_pairs=256).train
    net = DPNet(
        PeriodicMLP(1, (16,), 3), objective="projection", epochs=2, batch_size=128, progress=False
    )
    net.fit(traj)
    path = tmp_path / "model.pt"
    net.save(str(path))
    again = load(str(path))
    np.testing.assert_allclose(again.transform(traj[:50]), net.transform(traj[:50]), atol=1e-6)

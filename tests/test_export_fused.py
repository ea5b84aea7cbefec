"""Positions-in exports fuse the map with the encoder's first layer (issue 41's cost goal):
the features, their Jacobian and the layer's ``W J`` are computed without autograd (for the
torsions from constant polynomial maps and one ``exp(log(.) @ E)``; for the Cartesian
coordinates from the first-order perturbation of Horn's eigenvector, no 3x3 inverse), and
the file's graph is one gather and one product. The file's value and gradient equal
autograd of the plain map (and the same encoder) in float64, one state and a batch, with
and without a periodic box; maps too large to fuse (a protein's contacts) keep their own
graph and agree too."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ALANINE_PDB, alanine_walk
from torch import nn

from dpnets import DPNet, TransferOperator
from dpnets.export import (
    PositionCartesian,
    PositionDistances,
    PositionTorsions,
    export,
    read_metadata,
)
from dpnets.nn import MLP

md = pytest.importorskip("mdtraj")
# tiny fits on a short walk: the diagnostics on training length are expected here
pytestmark = pytest.mark.filterwarnings("ignore::dpnets.diagnostics.DiagnosticWarning")

BOX = 2.2 * torch.eye(3, dtype=torch.float64)


class Plain(nn.Module):
    """The plain map with a fixed box, called with the positions only: export does not fuse
    it (not one of its maps), so the file differentiates the map's own graph."""

    def __init__(self, inputs: nn.Module, box: torch.Tensor | None) -> None:
        super().__init__()
        self.inputs = inputs
        self.box = box

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inputs(x, self.box)


def _maps() -> dict[str, nn.Module]:
    top = md.load(str(ALANINE_PDB))
    heavy = top.topology.select("not element H")
    quads = np.concatenate([md.compute_phi(top)[0], md.compute_psi(top)[0]])
    i, j = np.triu_indices(len(heavy), k=1)
    every = np.stack(np.triu_indices(top.n_atoms, k=1), 1)  # 231 pairs: too many to fuse
    rng = np.random.default_rng(2)
    many = np.stack([rng.permutation(top.n_atoms)[:4] for _ in range(60)])  # 60 torsions
    return {
        "torsions": PositionTorsions(quads[::-1].copy(), blocks=[1, 1]),
        "distances": PositionDistances(np.stack([heavy[i], heavy[j]], 1)),
        "cartesian": PositionCartesian(heavy, top.xyz[0, heavy]),
        "many torsions": PositionTorsions(many, blocks=[("chi1", 25), ("psi", 35)]),
        "many distances": PositionDistances(every),
    }


@pytest.fixture(scope="module")
def walk() -> np.ndarray:
    return alanine_walk(200).astype(np.float64)


@pytest.mark.parametrize(
    "kind", ["torsions", "distances", "cartesian", "many torsions", "many distances"]
)
def test_fused_file_equals_autograd_of_the_plain_map(kind, walk, tmp_path):
    fmap = _maps()[kind].double()
    with torch.no_grad():
        x = fmap(torch.tensor(walk)).numpy()
    enc = MLP(x.shape[1], (16, 16), 3, activation="celu")
    net = DPNet(enc, epochs=1, batch_size=64, progress=False, seed=0).fit(x)
    op = TransferOperator(net, reversible=True).fit(x)
    shape = walk.shape[1:]
    export(op, tmp_path / "f.pt", modes=[1, 2], dtype=torch.float64, inputs=fmap, input_shape=shape)
    fused = torch.jit.load(str(tmp_path / "f.pt"))
    assert read_metadata(tmp_path / "f.pt")["inputs"]["map"] == type(fmap).__name__
    rng = np.random.default_rng(0)
    w = torch.tensor(rng.normal(size=2))
    for box in (None, BOX):
        export(
            op,
            tmp_path / "p.pt",
            modes=[1, 2],
            dtype=torch.float64,
            inputs=Plain(fmap, box),
            input_shape=shape,
        )
        plain = torch.jit.load(str(tmp_path / "p.pt"))
        states = walk[[3, 50, 120, 199]]
        if box is not None:  # wrapped into the box: the molecule is cut, images are taken
            states = np.mod(states + 1.7, 2.2)
        states = torch.tensor(states)
        for batch in (states[:1], states[1:], states[2]):
            xa = batch.clone().requires_grad_(True)
            xb = batch.clone().requires_grad_(True)
            ya = fused(xa) if box is None else fused(xa, box)
            yb = plain(xb)
            assert ya.shape == yb.shape
            scale = float(yb.abs().max())
            assert float((ya - yb).abs().max()) < 1e-12 * max(scale, 1.0)
            (ga,) = torch.autograd.grad((ya * w).sum(), xa)
            (gb,) = torch.autograd.grad((yb * w).sum(), xb)
            assert float(gb.abs().max()) > 0
            assert float((ga - gb).abs().max()) < 1e-10 * float(gb.abs().max())


def test_fused_file_in_float32_agrees_with_the_model(walk, tmp_path):
    """float32 (what the benchmark writes): the file is checked against the float64 model
    on example states at export and written; its gradient equals the float64 file's."""
    fmap = _maps()["cartesian"]
    with torch.no_grad():
        x = fmap.double()(torch.tensor(walk)).numpy()
    net = DPNet(MLP(x.shape[1], (16,), 2), epochs=1, batch_size=64, progress=False, seed=0)
    op = TransferOperator(net.fit(x), reversible=True).fit(x)
    shape = walk.shape[1:]
    kw = {"inputs": fmap, "input_shape": shape, "example": walk[::20]}
    meta = export(op, tmp_path / "f32.pt", dtype=torch.float32, **kw)
    assert meta["precision"]["dtype"] == "float32" and meta["precision"]["error"] < 1e-4
    export(op, tmp_path / "f64.pt", dtype=torch.float64, **kw)
    g = []
    for name in ("f32.pt", "f64.pt"):
        xi = torch.tensor(walk[77]).requires_grad_(True)
        (gi,) = torch.autograd.grad(torch.jit.load(str(tmp_path / name))(xi).sum(), xi)
        g.append(gi)
    assert float((g[0] - g[1]).abs().max()) < 1e-3 * float(g[1].abs().max())


@pytest.mark.parametrize("kind", ["torsions", "distances", "cartesian"])
@pytest.mark.parametrize("activation", ["celu", "relu", "tanh", "gelu", "silu", "softplus"])
def test_forces_equal_minus_the_autograd_gradient(kind, activation, walk, tmp_path):
    """The file's ``forces`` method and ``openmm_torch_cv(forces=True)``: the CV and minus
    its gradient without autograd, equal to autograd of the file itself (float64, one
    state, each output, with and without a box)."""
    from dpnets.engines import openmm_torch_cv

    fmap = _maps()[kind].double()
    with torch.no_grad():
        x = fmap(torch.tensor(walk)).numpy()
    enc = MLP(x.shape[1], (16, 16), 3, activation=activation)
    net = DPNet(enc, epochs=1, batch_size=64, progress=False, seed=0).fit(x)
    op = TransferOperator(net, reversible=True).fit(x)
    out = tmp_path / "cv.pt"
    meta = export(op, out, [1, 2], torch.float64, inputs=fmap, input_shape=walk.shape[1:])
    assert meta["forces"] == {"available": True, "reason": None}
    wrapped = torch.jit.load(str(openmm_torch_cv(out, output=1, forces=True)))
    for box in (None, BOX):
        for o in (0, 1):
            cv = torch.jit.load(str(out))  # autograd on a fresh load: the unoptimised graph
            xx = torch.tensor(walk[7]).requires_grad_(True)
            y = cv(xx, box)[o]
            (g,) = torch.autograd.grad(y, xx)
            value, forces = cv.forces(torch.tensor(walk[7]), box, o)
            assert forces.shape == (22, 3) and forces.dtype == torch.float64
            assert abs(float(value - y)) < 1e-12
            np.testing.assert_allclose(forces.numpy(), -g.numpy(), rtol=1e-10, atol=1e-12)
        value, forces = wrapped(torch.tensor(walk[7]), box)
        cv = torch.jit.load(str(out))
        xx = torch.tensor(walk[7]).requires_grad_(True)
        (g,) = torch.autograd.grad(cv(xx, box)[1], xx)
        np.testing.assert_allclose(forces.numpy(), -g.numpy(), rtol=1e-10, atol=1e-12)
    single, f32 = wrapped(torch.tensor(walk[7], dtype=torch.float32))  # the input's dtype
    assert single.dtype == f32.dtype == torch.float32


def test_forces_refused_for_an_encoder_with_layer_norm(walk, tmp_path):
    """An encoder whose derivative is not written out (a LayerNorm): the metadata says why,
    ``openmm_torch_cv(forces=True)`` refuses in one line, and the autograd file remains."""
    from dpnets.engines import openmm_torch_cv
    from dpnets.export import ExportError

    fmap = _maps()["distances"].double()
    with torch.no_grad():
        x = fmap(torch.tensor(walk)).numpy()
    enc = MLP(x.shape[1], (16, 16), 3, activation="celu", layer_norm=True)
    net = DPNet(enc, epochs=1, batch_size=64, progress=False, seed=0).fit(x)
    op = TransferOperator(net, reversible=True).fit(x)
    out = tmp_path / "cv.pt"
    meta = export(op, out, [1], torch.float64, inputs=fmap, input_shape=walk.shape[1:])
    assert meta["forces"]["available"] is False
    assert "LayerNorm" in meta["forces"]["reason"]
    with pytest.raises(ExportError, match="LayerNorm"):
        openmm_torch_cv(out, forces=True)
    assert openmm_torch_cv(out).name == "cv_openmm.pt"  # the autograd scalar


@pytest.mark.parametrize("kind", ["torsions", "distances"])
@pytest.mark.parametrize("activation", ["celu", "tanh"])
def test_forces_of_a_map_too_large_to_fuse(kind, activation, walk, tmp_path, monkeypatch):
    """A torsion or distance map not fused (here forced by a fusing limit of 0, as a
    protein's 852 torsions or 1312 contacts are): the file keeps the map's own graph and its
    ``forces`` method takes the features' local Jacobians and the whole encoder by hand;
    equal to minus autograd of the same file (float64, each output, with and without a
    box) and through ``openmm_torch_cv(forces=True)``."""
    import sys

    from dpnets.engines import openmm_torch_cv

    monkeypatch.setattr(sys.modules["dpnets.export"], "_FUSED_ENTRIES", 0)
    fmap = _maps()[kind].double()
    with torch.no_grad():
        x = fmap(torch.tensor(walk)).numpy()
    enc = MLP(x.shape[1], (16, 16), 3, activation=activation)
    net = DPNet(enc, epochs=1, batch_size=64, progress=False, seed=0).fit(x)
    op = TransferOperator(net, reversible=True).fit(x)
    out = tmp_path / "cv.pt"
    meta = export(op, out, [1, 2], torch.float64, inputs=fmap, input_shape=walk.shape[1:])
    assert meta["forces"] == {"available": True, "reason": None}
    wrapped = torch.jit.load(str(openmm_torch_cv(out, output=1, forces=True)))
    state = np.mod(walk[7] + 1.7, 2.2)  # wrapped: the box's images are taken
    for box in (None, BOX):
        for o in (0, 1):
            cv = torch.jit.load(str(out))
            xx = torch.tensor(state).requires_grad_(True)
            y = cv(xx, box)[o]
            (g,) = torch.autograd.grad(y, xx)
            value, forces = cv.forces(torch.tensor(state), box, o)
            assert forces.shape == (22, 3) and forces.dtype == torch.float64
            assert float(g.abs().max()) > 0
            assert abs(float(value - y)) < 1e-12 * max(abs(float(y)), 1.0)
            np.testing.assert_allclose(forces.numpy(), -g.numpy(), rtol=1e-10, atol=1e-12)
        value, forces = wrapped(torch.tensor(state), box)
        cv = torch.jit.load(str(out))
        xx = torch.tensor(state).requires_grad_(True)
        (g,) = torch.autograd.grad(cv(xx, box)[1], xx)
        np.testing.assert_allclose(forces.numpy(), -g.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("activation", ["celu", "tanh"])
def test_cartesian_forces_contract_the_gradient_with_the_map(activation, walk, tmp_path):
    """A Cartesian map's ``forces`` (every atom, as a protein's C-alphas): the CV's
    gradient contracted with the superposition's response in closed form (no ``W J``);
    equal to minus autograd of the same file (float64, each output, with and without a
    box)."""
    top = md.load(str(ALANINE_PDB))
    every = np.arange(top.n_atoms)
    fmap = PositionCartesian(every, top.xyz[0]).double()
    with torch.no_grad():
        x = fmap(torch.tensor(walk)).numpy()
    enc = MLP(x.shape[1], (16, 16), 3, activation=activation)
    net = DPNet(enc, epochs=1, batch_size=64, progress=False, seed=0).fit(x)
    op = TransferOperator(net, reversible=True).fit(x)
    out = tmp_path / "cv.pt"
    meta = export(op, out, [1, 2], torch.float64, inputs=fmap, input_shape=walk.shape[1:])
    assert meta["forces"] == {"available": True, "reason": None}
    assert torch.jit.load(str(out)).original_name == "_CartesianSlowModes"
    state = np.mod(walk[7] + 1.7, 2.2)  # wrapped: the box's images are taken
    for box in (None, BOX):
        for o in (0, 1):
            cv = torch.jit.load(str(out))
            xx = torch.tensor(state).requires_grad_(True)
            y = cv(xx, box)[o]
            (g,) = torch.autograd.grad(y, xx)
            value, forces = cv.forces(torch.tensor(state), box, o)
            assert forces.shape == (22, 3) and forces.dtype == torch.float64
            assert float(g.abs().max()) > 0
            assert abs(float(value - y)) < 1e-12 * max(abs(float(y)), 1.0)
            np.testing.assert_allclose(forces.numpy(), -g.numpy(), rtol=1e-10, atol=1e-12)

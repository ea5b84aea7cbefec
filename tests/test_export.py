"""Learned slow modes as collective variables (issue 27): ``dpnets.export`` and ``dpnets
export`` write TorchScript files that reproduce ``model.eigenfunctions`` with torch alone (a
fresh Python without dpnets, and a C++ program on the libtorch of the torch wheel, the loader
PLUMED and OpenMM-Torch use), take what the engines compute, and refuse what they cannot
export."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from dpnets import DPNet, TransferOperator, export
from dpnets.baselines import DMD, EDMD, KernelDMD, chebyshev_features
from dpnets.cli import main
from dpnets.export import ExportError, parse_modes, read_metadata
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck

PDB = Path(__file__).resolve().parents[1] / "src/dpnets/systems/data/alanine-dipeptide.pdb"


def _data() -> np.ndarray:
    """Two independent OU coordinates and a nonlinear mix: (1500, 2)."""
    a = OrnsteinUhlenbeck(dt=0.2).sample(1500, seed=0)
    b = OrnsteinUhlenbeck(dt=0.2).sample(1500, seed=1)
    return np.concatenate([a + 0.3 * b**2, b], axis=1)


def _model(double: bool) -> TransferOperator:
    x = _data()
    enc = MLP(2, (16, 16), 3, activation="celu")
    if double:
        enc = enc.double()
    net = DPNet(enc, epochs=2, batch_size=256, progress=False, seed=0).fit(x)
    return TransferOperator(net, dt=0.2).fit(x)


@pytest.fixture(scope="module")
def models():
    return _data(), _model(False), _model(True)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


_NO_DPNETS = r"""
import sys
sys.modules["dpnets"] = None  # any import of dpnets fails in this process
try:
    import dpnets  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("dpnets is importable")
import numpy as np
import torch

x = np.load(sys.argv[1])
out = {}
for name in sys.argv[2:]:
    extra = {"dpnets.json": ""}
    cv = torch.jit.load(name + ".pt", _extra_files=extra)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = cv(xt)
    grads = [
        torch.autograd.grad(y[:, k].sum(), xt, retain_graph=True)[0]
        for k in range(y.shape[1])
    ]
    out[name + "_y"] = y.detach().double().numpy()
    out[name + "_g"] = torch.stack(grads, 1).double().numpy()
    out[name + "_modes"] = np.array(cv.modes)
    raw = extra["dpnets.json"]
    out[name + "_meta"] = np.array(raw.decode() if isinstance(raw, bytes) else raw)
np.savez(sys.argv[1] + ".out.npz", **out)
"""


def _fresh_python(tmp: Path, x: np.ndarray, names: list[str]) -> dict:
    np.save(tmp / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    subprocess.run(
        [sys.executable, "-c", _NO_DPNETS, str(tmp / "x.npy"), *[str(tmp / n) for n in names]],
        check=True,
        cwd=tmp,
        env=env,
        timeout=120,
    )
    out = np.load(tmp / "x.npy.out.npz")
    return {k.removeprefix(str(tmp) + "/"): out[k] for k in out.files}


def test_exported_file_reproduces_eigenfunctions_without_dpnets(models, tmp_path):
    x, op32, op64 = models
    export(op32, tmp_path / "cv32.pt", modes=[1, 2])
    meta = export(op64, tmp_path / "cv64.pt", modes=[1, 2, 3], dtype=torch.float64)
    assert meta["modes"] == [1, 2, 3] and meta["dtype"] == "float64"
    probe = np.concatenate([x[::50], x[:5] + 2.0])  # training states and a few off them
    got = _fresh_python(tmp_path, probe, ["cv32", "cv64"])
    # float32: within 1e-5 relative of model.eigenfunctions (measured: ~1e-7)
    ref32 = op32.eigenfunctions(probe).real[:, [1, 2]]
    assert _rel(got["cv32_y"], ref32) < 1e-5
    ref64 = op64.eigenfunctions(probe).real[:, [1, 2, 3]]
    assert _rel(got["cv64_y"], ref64) < 1e-12
    # input gradients against central finite differences of model.eigenfunctions
    h = 1e-6
    fd = np.stack(
        [
            (op64.eigenfunctions(probe + h * e).real - op64.eigenfunctions(probe - h * e).real)[
                :, [1, 2, 3]
            ]
            / (2 * h)
            for e in np.eye(2)
        ],
        axis=2,
    )  # (n, modes, d)
    assert _rel(got["cv64_g"], fd) < 1e-6
    # the metadata travel in the file, readable with torch alone
    assert got["cv64_modes"].tolist() == [1, 2, 3]
    stored = json.loads(str(got["cv64_meta"]))
    lam = op64.eig()[[1, 2, 3]]
    assert np.allclose([v[0] for v in stored["eigenvalues"]], lam.real)
    assert stored["lag"] == 1 and stored["dt"] == 0.2 and stored["lag_time"] == 0.2
    assert np.allclose(stored["timescales"], op64.implied_timescales()[[1, 2, 3]])
    assert read_metadata(tmp_path / "cv32.pt")["dtype"] == "float32"


def test_one_state_and_dtype_casts(models, tmp_path):
    x, op32, op64 = models
    export(op32, tmp_path / "cv.pt", modes=1)
    cv = torch.jit.load(str(tmp_path / "cv.pt"))
    # float64 input computed in float32, given back in the input's dtype; one state ->
    # (n_modes,)
    one = cv(torch.tensor(x[3]))
    assert one.shape == (1,) and one.dtype == torch.float64
    assert abs(float(one[0]) - op32.eigenfunctions(x[3:4]).real[0, 1]) < 1e-5
    # a float64 file fed float32 (as PLUMED feeds it) answers float32, with float64 inside
    export(op64, tmp_path / "cv64.pt", modes=[1, 2], dtype=torch.float64)
    cv64 = torch.jit.load(str(tmp_path / "cv64.pt"))
    x32 = torch.tensor(x[:20], dtype=torch.float32)
    got = cv64(x32)
    assert got.dtype == torch.float32
    ref = op64.eigenfunctions(x32.double().numpy()).real[:, [1, 2]]
    assert _rel(got.double().numpy(), ref) < 1e-6
    with pytest.raises(Exception):  # noqa: B017 - a wrong shape fails inside the network
        cv(torch.zeros(4, 3))


def test_linear_features_export(tmp_path):
    """DMD (linear features) exports too; its two modes here are a complex pair
    (0.81086 +- 0.00304i), refused by name unless exported as real and imaginary parts."""
    x = _data()
    dmd = DMD().fit(x)
    lam = dmd.eig()
    assert lam[0].imag > 0.003 and lam[1] == np.conj(lam[0])
    with pytest.raises(
        ExportError,
        match=r"mode 0 is complex \(eigenvalue 0\.81086\+0\.0030402i, "
        r"conjugate of mode 1\).*reversible=True.*complex_parts=True",
    ):
        export(dmd, tmp_path / "dmd.pt", modes=[0], dtype=torch.float64)
    with pytest.raises(ExportError, match="modes 0 and 1 are a complex-conjugate pair"):
        export(dmd, tmp_path / "dmd.pt", modes=[0, 1], complex_parts=True)
    assert not (tmp_path / "dmd.pt").exists()
    meta = export(
        dmd, tmp_path / "dmd.pt", modes=[1], dtype=torch.float64, complex_parts=True, example=x[:40]
    )
    assert meta["outputs"] == ["mode 1 (real part)", "mode 1 (imaginary part)"]
    assert meta["output_modes"] == [1, 1] and meta["output_parts"] == ["real", "imaginary"]
    assert meta["eigenvalues"] == [[lam[1].real, lam[1].imag]]
    cv = torch.jit.load(str(tmp_path / "dmd.pt"))
    assert cv.outputs == meta["outputs"]
    got = cv(torch.tensor(x[:40])).numpy()
    ef = dmd.eigenfunctions(x[:40])[:, 1]
    assert got.shape == (40, 2) and np.abs(ef.imag).max() > 0.1  # a genuinely complex mode
    assert _rel(got, np.stack([ef.real, ef.imag], 1)) < 1e-12


def test_vampnet_generator_and_autoencoder_export(tmp_path):
    """VAMPNet features (the instantaneous lobe), a Generator on a fixed torch module and a
    Koopman autoencoder's latent eigenfunctions."""
    from dpnets import Generator
    from dpnets.baselines import DynamicAutoencoder, VAMPNet

    x = _data()
    net = VAMPNet(MLP(2, (8,), 2).double(), epochs=1, batch_size=256, progress=False, seed=0)
    op = TransferOperator(net.fit(x)).fit(x)
    export(op, tmp_path / "vamp.pt", modes=[1, 2], dtype=torch.float64)
    got = torch.jit.load(str(tmp_path / "vamp.pt"))(torch.tensor(x[:30])).numpy()
    assert _rel(got, op.eigenfunctions(x[:30]).real[:, [1, 2]]) < 1e-12
    torch.manual_seed(0)
    psi = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh()).double()
    gen = Generator(psi, drift=lambda z: -z, diffusion=np.sqrt(2.0)).fit(x[:500])
    export(gen, tmp_path / "gen.pt", modes=[1], dtype=torch.float64)
    got = torch.jit.load(str(tmp_path / "gen.pt"))(torch.tensor(x[:30])).numpy()
    assert _rel(got, gen.eigenfunctions(x[:30]).real[:, [1]]) < 1e-12
    gen_meta = export(gen, tmp_path / "gen.pt", modes=[1], example=x[:30])
    assert gen_meta["precision"]["checked_on"] == 30 and gen_meta["precision"]["error"] < 1e-4
    # the autoencoder's latent pair is complex (-0.99854 +- 0.0029548i): both parts
    ae = DynamicAutoencoder(epochs=1, seed=0, progress=False).fit(x[:600])
    assert ae.eig()[0].imag != 0
    meta = export(ae, tmp_path / "ae.pt", modes=[0], complex_parts=True, example=x[:30])
    assert meta["precision"]["dtype"] == "float32" and meta["precision"]["error"] < 1e-4
    got = torch.jit.load(str(tmp_path / "ae.pt"))(torch.tensor(x[:30])).numpy()
    ef = ae.eigenfunctions(x[:30])[:, 0]
    assert _rel(got, np.stack([ef.real, ef.imag], 1)) < 1e-5


class _Offset(torch.nn.Module):
    """Features varying by 1e-3 about 30 (as SchNet's mean read-out does): float32 keeps
    about 2e-3 of their variation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 30.0 + 1e-3 * x


def test_precision_is_judged_on_the_cv_range(models, tmp_path):
    """float32 is judged against the model in float64, relative to the CV's range: a
    state where the CV is almost 0 passes (the old check, relative to the value, refused
    it); features that vary little about a large mean get a float64 file, or a refusal
    naming the keyword when float32 was asked for."""
    from dpnets.export import CLI_REMEDIES

    x, op32, _ = models
    ef = op32.eigenfunctions(x).real[:, 1]
    i = int(np.argmin(np.abs(ef)))
    assert abs(ef[i]) < 1e-3 < np.ptp(ef)
    prec = export(op32, tmp_path / "cv.pt", modes=[1], example=x[i])["precision"]
    assert prec["dtype"] == "float32" and prec["requested"] == "auto"
    assert prec["checked_on"] == 1 and prec["error"] < 1e-4  # of MIN_RANGE (0.01)
    torch.manual_seed(0)
    psi = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), _Offset())
    op = TransferOperator(psi).fit(x)
    assert np.all(op.eig().imag == 0)
    ex = x[::30]
    meta = export(op, tmp_path / "ill.pt", modes=[1], example=ex)
    prec = meta["precision"]
    assert meta["dtype"] == prec["dtype"] == "float64" and prec["checked_on"] == 50
    assert prec["float32_error"] > 1e-3 and prec["error"] < 1e-9
    assert prec["note"].startswith("float32 differs from the model by ")
    assert "of the CV's range over the 50 example states (tolerance 0.0001)" in prec["note"]
    # the float64 file against the model's feature map in float64
    exact = psi.double()(torch.tensor(x[:200])).detach().numpy()
    ref = (op._basis(exact) @ op.right_eigvecs_[:, 1]).real
    got = torch.jit.load(str(tmp_path / "ill.pt"))(torch.tensor(x[:200])).numpy()[:, 0]
    assert np.abs(got - ref).max() / np.ptp(ref) < 1e-9
    psi.float()
    with pytest.raises(ExportError, match=r"in float32 .* it was not written: use dtype=torch"):
        export(op, tmp_path / "f32.pt", modes=[1], dtype=torch.float32, example=ex)
    with pytest.raises(ExportError, match=r"use --precision float64 \(or --precision auto"):
        export(op, tmp_path / "f32.pt", [1], torch.float32, example=ex, remedies=CLI_REMEDIES)
    assert not (tmp_path / "f32.pt").exists()
    # without example states: float32's rounding estimated from the final affine map
    prec = export(op, tmp_path / "est.pt", modes=[1])["precision"]
    assert prec["dtype"] == "float64" and prec["checked_on"] == 0
    assert prec["float32_error"] > 1e-3 and "estimated from the final affine map" in prec["note"]
    assert export(op32, tmp_path / "ok.pt", modes=[1])["precision"]["float32_error"] is None


def test_float64_file_of_a_float32_dpnet_is_the_models_own_map(tmp_path):
    """A float32 DPNet's input standardisation is folded into its first layer in float64
    and kept there: the float64 file computes the model's map (it was rounded to float32
    when folded, so that inputs with a small spread about a large mean, such as the sin/cos
    of a stiff torsion, had the float64 file refused as 'non-deterministic')."""
    x = 100.0 + 0.01 * _data()[:600]
    net = DPNet(MLP(2, (8,), 3), epochs=1, batch_size=200, progress=False, seed=0).fit(x)
    op = TransferOperator(net, dt=0.2).fit(x)
    meta = export(op, tmp_path / "cv.pt", modes=[1, 2], dtype=torch.float64, example=x[::20])
    assert meta["dtype"] == "float64" and meta["precision"]["error"] < 1e-10
    # the model's map in float64: standardised in float64, the float32 weights exact in it
    z = torch.tensor((x[:100] - net.input_shift_) / net.input_scale_)
    psi = copy.deepcopy(net.feature_module()[1]).double()(z).detach().numpy()
    ref = (op._basis(psi) @ op.right_eigvecs_[:, 1:3]).real
    got = torch.jit.load(str(tmp_path / "cv.pt"))(torch.tensor(x[:100])).numpy()
    assert np.abs(got - ref).max() / np.ptp(ref, axis=0).min() < 1e-10
    assert np.abs(got - op.eigenfunctions(x[:100]).real[:, 1:3]).max() < 1e-5  # float32's


# ---------------------------------------------------------------------- C++ (libtorch)
_CPP = r"""
// torch::jit::load, as PLUMED's PYTORCH_MODEL and OpenMM-Torch load their models
#include <torch/script.h>
#include <iomanip>
#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) { std::cerr << "usage: load_cv FILE N D < inputs\n"; return 2; }
  torch::jit::script::Module cv = torch::jit::load(argv[1]);
  const long n = std::stol(argv[2]), d = std::stol(argv[3]);
  std::vector<double> buf(n * d);
  for (auto& v : buf) std::cin >> v;
  auto x = torch::from_blob(buf.data(), {n, d}, torch::kFloat64).clone().to(torch::kFloat32);
  x.set_requires_grad(true);
  auto y = cv.forward({x}).toTensor();
  y.select(1, 0).sum().backward();
  auto yd = y.detach().to(torch::kFloat64).contiguous();
  auto gd = x.grad().to(torch::kFloat64).contiguous();
  const double* yp = yd.data_ptr<double>();
  const double* gp = gd.data_ptr<double>();
  std::cout << std::setprecision(12);
  for (long i = 0; i < yd.numel(); ++i) std::cout << yp[i] << "\n";
  for (long i = 0; i < gd.numel(); ++i) std::cout << gp[i] << "\n";
  return 0;
}
"""


@pytest.fixture(scope="session")
def cpp_loader(request, tmp_path_factory) -> Path:
    """The C++ loader compiled against the torch wheel's libtorch (about 30 s on 2 busy
    cores), cached in pytest's cache folder (keyed by the source and torch version), else in
    its temporary folder."""
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler (c++) on this machine")
    from torch.utils import cpp_extension

    key = hashlib.sha256((_CPP + torch.__version__ + cxx).encode()).hexdigest()[:16]
    try:
        folder = Path(request.config.cache.mkdir(f"dpnets-export-cpp-{key}"))
    except (AttributeError, OSError):  # no cache plugin (-p no:cacheprovider)
        folder = tmp_path_factory.mktemp("cpp")
    exe = folder / "load_cv"
    if exe.is_file():
        return exe
    (folder / "load_cv.cpp").write_text(_CPP)
    libs = cpp_extension.library_paths()
    cmd = [
        cxx,
        "-O1",
        "-std=c++20",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
    ]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    cmd += [str(folder / "load_cv.cpp"), "-o", str(folder / "load_cv.tmp")]
    cmd += [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs]
    cmd += ["-ltorch", "-ltorch_cpu", "-lc10"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    os.replace(folder / "load_cv.tmp", exe)
    return exe


def test_cpp_libtorch_loads_the_file(models, tmp_path, cpp_loader):
    x, op32, _ = models
    export(op32, tmp_path / "cv.pt", modes=[1, 2])
    probe = x[::100]
    text = "\n".join(" ".join(repr(float(v)) for v in row) for row in probe)
    res = subprocess.run(
        [str(cpp_loader), str(tmp_path / "cv.pt"), str(len(probe)), "2"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    nums = np.array([float(v) for v in res.stdout.split()])
    n = len(probe)
    values, grads = nums[: 2 * n].reshape(n, 2), nums[2 * n :].reshape(n, 2)
    assert _rel(values, op32.eigenfunctions(probe).real[:, [1, 2]]) < 1e-5
    cv = torch.jit.load(str(tmp_path / "cv.pt"))
    xt = torch.tensor(probe, dtype=torch.float32, requires_grad=True)
    cv(xt)[:, 0].sum().backward()
    assert _rel(grads, xt.grad.double().numpy()) < 1e-6


# ---------------------------------------------------------------------- MD fit folders
def _md_trajectory(tmp: Path, n: int = 150) -> Path:
    """A correlated random walk of the alanine dipeptide pdb's atoms (nm), as a .dcd file."""
    md = pytest.importorskip("mdtraj")
    top = md.load(str(PDB))
    rng = np.random.default_rng(0)
    noise = np.zeros((n, top.n_atoms, 3))
    for t in range(1, n):
        noise[t] = 0.9 * noise[t - 1] + 0.01 * rng.normal(size=(top.n_atoms, 3))
    path = tmp / "traj.dcd"
    md.Trajectory(top.xyz + noise.astype(np.float32), top.topology).save_dcd(str(path))
    return path


def _fit(tmp: Path, features: str, *extra: str) -> Path:
    traj = _md_trajectory(tmp)
    fit = tmp / f"fit-{features}"
    args = ["fit", str(traj), "--topology", str(PDB), "--features", features, "--lag", "2"]
    args += ["--epochs", "1", "--dim", "2", "--batch-size", "64", "--out", str(fit), "--quiet"]
    assert main([*args, *extra]) == 0
    return fit


def test_plumed_dat_torsions_match_the_topology(tmp_path):
    md = pytest.importorskip("mdtraj")
    from dpnets import load
    from dpnets.datasets import read_trajectories

    fit = _fit(tmp_path, "dihedrals")
    out = tmp_path / "engine" / "cv.pt"
    out.parent.mkdir()
    assert main(["export", str(fit), "--modes", "1,2", "--out", str(out)]) == 0
    plumed = (out.parent / "plumed.dat").read_text()
    torsions = {}
    for line in plumed.splitlines():
        if "TORSION ATOMS=" in line:
            label, rest = line.split(":", 1)
            atoms = rest.split("ATOMS=")[1].split()[0]
            torsions[label] = [int(a) - 1 for a in atoms.split(",")]  # PLUMED is 1-based
    traj = md.load(str(tmp_path / "traj.dcd"), top=str(PDB))
    phi_idx, phi = md.compute_phi(traj)
    psi_idx, psi = md.compute_psi(traj)
    assert torsions == {"phi1": phi_idx[0].tolist(), "psi1": psi_idx[0].tolist()}
    assert f"cv: PYTORCH_MODEL FILE={out.resolve()} ARG=phi1,psi1" in plumed
    assert "OPES_METAD ARG=cv.node-0" in plumed
    # the module takes the raw torsions (radians) and gives the model's eigenfunctions
    op = load(fit / "model.pt")
    feats = read_trajectories([str(tmp_path / "traj.dcd")], topology=str(PDB), features="dihedrals")
    ref = op.eigenfunctions(feats.data[0]).real[:, [1, 2]]
    cv = torch.jit.load(str(out))
    got = cv(torch.tensor(np.concatenate([phi, psi], 1))).double().numpy()
    assert _rel(got, ref) < 1e-5
    meta = read_metadata(out)
    assert meta["inputs"]["names"] == ["phi1", "psi1"] and meta["inputs"]["shape"] == [2]
    _check_openmm_table(out, torsions, phi_idx[0], psi_idx[0])


def _check_openmm_table(path: Path, torsions: dict, phi_atoms, psi_atoms) -> None:
    """The OpenMM CPU route: the file tabulated as a periodic Continuous2DFunction of two
    CustomTorsionForce angles equals the file to the grid's interpolation error, and OpenMM's
    torsions of the pdb are mdtraj's (the convention of the exported inputs)."""
    openmm = pytest.importorskip("openmm")
    md = pytest.importorskip("mdtraj")
    from dpnets.engines import openmm_torsion_cv

    force, estimate = openmm_torsion_cv(path, [torsions["phi1"], torsions["psi1"]], n_grid=121)
    rng = np.random.default_rng(0)
    angles = rng.uniform(-np.pi, np.pi, size=(60, 2))
    system = openmm.System()
    for _ in range(8):
        system.addParticle(1.0)
    probe, _ = openmm_torsion_cv(path, [[0, 1, 2, 3], [4, 5, 6, 7]], n_grid=121)
    system.addForce(probe)
    ctx = openmm.Context(
        system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    got, xyz = [], []
    for a, b in angles:  # two 4-atom chains with torsions a and b (nm)
        pos = [[0, 1, 0], [0, 0, 0], [1, 0, 0], [1, np.cos(a), np.sin(a)]]
        pos += [[0, 1, 5], [0, 0, 5], [1, 0, 5], [1, np.cos(b), 5 + np.sin(b)]]
        ctx.setPositions(pos)
        got.append(ctx.getState(getEnergy=True).getPotentialEnergy()._value)
        xyz.append(pos)
    top = md.Topology()
    res = top.add_residue("X", top.add_chain())
    for k in range(8):
        top.add_atom(f"C{k}", md.element.carbon, res)
    traj = md.Trajectory(np.array(xyz, dtype=np.float32), top)
    real = md.compute_dihedrals(traj, [[0, 1, 2, 3], [4, 5, 6, 7]])  # the sign convention
    cv = torch.jit.load(str(path))
    ref = cv(torch.tensor(real, dtype=torch.float64))[:, 0].double().numpy()
    span = np.ptp(ref)
    assert np.abs(np.array(got) - ref).max() / span < 1e-3  # bicubic on 3-degree cells
    assert estimate < 1e-3
    # OpenMM's torsions of the pdb's phi/psi atoms are mdtraj's
    pdb = md.load(str(PDB))
    t = openmm.CustomTorsionForce("theta")
    t.addTorsion(*map(int, phi_atoms), [])
    sys2 = openmm.System()
    for _ in range(pdb.n_atoms):
        sys2.addParticle(1.0)
    sys2.addForce(t)
    ctx2 = openmm.Context(
        sys2, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    ctx2.setPositions(pdb.xyz[0])
    theta = ctx2.getState(getEnergy=True).getPotentialEnergy()._value
    assert abs(theta - md.compute_phi(pdb)[1][0, 0]) < 1e-5
    assert force.getNumCollectiveVariables() == 2
    # the tabulated CV drives OpenMM's own well-tempered metadynamics (CPU platform)
    from openmm import app, unit

    pdbf = app.PDBFile(str(PDB))
    system = app.ForceField("amber14-all.xml").createSystem(
        pdbf.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds
    )
    grid = np.array(force.getTabulatedFunction(0).getFunctionParameters()[2])
    bias = app.BiasVariable(force, grid.min() - 0.1, grid.max() + 0.1, 0.05, False, 100)
    meta = app.Metadynamics(
        system, [bias], 400 * unit.kelvin, 8.0, 1.0 * unit.kilojoule_per_mole, 50
    )
    integrator = openmm.LangevinMiddleIntegrator(400, 1.0, 0.002)
    integrator.setRandomNumberSeed(1)
    sim = app.Simulation(
        pdbf.topology, system, integrator, openmm.Platform.getPlatformByName("Reference")
    )
    sim.context.setPositions(pdbf.positions)
    meta.step(sim, 200)
    fes = meta.getFreeEnergy().value_in_unit(unit.kilojoule_per_mole)
    assert np.ptp(fes) > 0  # hills were added
    s_now = meta.getCollectiveVariables(sim)[0]
    theta = md.compute_dihedrals(
        md.Trajectory(
            sim.context.getState(getPositions=True).getPositions(asNumpy=True)._value[None],
            md.load_topology(str(PDB)),
        ),
        [list(map(int, phi_atoms)), list(map(int, psi_atoms))],
    )
    assert abs(s_now - float(cv(torch.tensor(theta, dtype=torch.float64))[0, 0])) < 1e-3 * span


def test_plumed_dat_distances(tmp_path):
    md = pytest.importorskip("mdtraj")
    fit = _fit(tmp_path, "distances", "--selection", "name CA or name N")
    out = tmp_path / "cv.pt"
    assert main(["export", str(fit), "--out", str(out)]) == 0
    plumed = (tmp_path / "plumed.dat").read_text()
    top = md.load_topology(str(PDB))
    sel = top.select("name CA or name N")
    pairs = [(int(a), int(b)) for k, a in enumerate(sel) for b in sel[k + 1 :]]
    lines = [ln for ln in plumed.splitlines() if "DISTANCE ATOMS=" in ln]
    got = [tuple(int(v) - 1 for v in ln.split("ATOMS=")[1].split()[0].split(",")) for ln in lines]
    assert got == pairs
    assert f"ARG={','.join(f'd{k + 1}' for k in range(len(pairs)))}" in plumed


def test_positions_cv_is_invariant_and_selects_atoms(models, tmp_path):
    pytest.importorskip("torch_geometric")
    md = pytest.importorskip("mdtraj")
    from dpnets import load

    fit = _fit(tmp_path, "positions", "--encoder", "schnet")
    out = tmp_path / "cv.pt"
    assert main(["export", str(fit), "--out", str(out), "--modes", "1,2", "--double"]) == 0
    assert (tmp_path / "openmm_torch_recipe.py").is_file()
    assert not (tmp_path / "plumed.dat").exists()
    traj = md.load(str(tmp_path / "traj.dcd"), top=str(PDB))
    xyz = traj.xyz[::15].astype(np.float64)  # all 22 atoms, nm
    cv = torch.jit.load(str(out))
    got = cv(torch.tensor(xyz)).numpy()
    op = load(fit / "model.pt")
    heavy = [a.index for a in traj.topology.atoms if a.element.symbol != "H"]
    assert _rel(got, op.eigenfunctions(xyz[:, heavy]).real[:, [1, 2]]) < 1e-5
    rng = np.random.default_rng(3)
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    rot = q * np.sign(np.diag(r))
    if np.linalg.det(rot) < 0:
        rot[:, 0] *= -1  # a proper rotation
    moved = xyz @ rot.T + rng.normal(size=3) * 2.0
    assert _rel(cv(torch.tensor(moved)).numpy(), got) < 1e-9
    one = cv(torch.tensor(xyz[0]))  # one state (n_atoms, 3)
    assert np.allclose(one.numpy(), got[0])
    # OpenMM-Torch's scalar: one output of the file, its value and its position gradient
    from dpnets.engines import openmm_torch_cv

    scalar = torch.jit.load(str(openmm_torch_cv(out, output=1)))
    assert (tmp_path / "cv_openmm.pt").is_file()
    pos = torch.tensor(xyz[3], requires_grad=True)
    value = scalar(pos)
    assert value.shape == () and abs(float(value.detach()) - got[3, 1]) < 1e-12
    value.backward()
    ref = torch.tensor(xyz[3], requires_grad=True)
    cv(ref)[1].backward()
    torch.testing.assert_close(pos.grad, ref.grad, rtol=0, atol=0)
    box = 3.0 * torch.eye(3, dtype=torch.float64)  # the box OpenMM-Torch passes
    assert float(scalar(pos.detach(), box)) == float(cv(pos.detach(), box)[1])
    for bad, match in ((2, "has 2 outputs"), (-1, "has 2 outputs"), (True, "integer")):
        with pytest.raises(ExportError, match=match):
            openmm_torch_cv(out, tmp_path / "bad.pt", output=bad)
    export(models[1], tmp_path / "features.pt")  # a file that takes features
    with pytest.raises(ExportError, match="not the engine's positions"):
        openmm_torch_cv(tmp_path / "features.pt", tmp_path / "bad.pt")
    assert not (tmp_path / "bad.pt").exists()


# ---------------------------------------------------------------------- refusals
def test_refusals(models, tmp_path):
    x, op32, _ = models
    net = op32.features_
    with pytest.raises(ExportError, match="without a transfer operator"):
        export(net, tmp_path / "a.pt")
    kdmd = KernelDMD(rank=3).fit(x[:300])
    with pytest.raises(ExportError, match="kernel"):
        export(kdmd, tmp_path / "a.pt")
    edmd = EDMD(chebyshev_features(2, domain=(-4, 4))).fit(x)
    with pytest.raises(ExportError, match="not by a torch module"):
        export(edmd, tmp_path / "a.pt")
    numpy_op = TransferOperator(lambda s: np.tanh(s)).fit(x)
    with pytest.raises(ExportError, match="not by a torch module"):
        export(numpy_op, tmp_path / "a.pt")
    with pytest.raises(ExportError, match="cannot export a str"):
        export("model.pt", tmp_path / "a.pt")
    with pytest.raises(ExportError, match=r"out of range: the model has 4 eigenfunctions"):
        export(op32, tmp_path / "a.pt", modes=[1, 4])
    for bad in ([], [1, 1], [1.5], [True], "1"):
        with pytest.raises(ExportError, match="modes"):
            export(op32, tmp_path / "a.pt", modes=bad)
    with pytest.raises(ExportError, match="dtype"):
        export(op32, tmp_path / "a.pt", dtype=torch.float16)
    with pytest.raises(ExportError, match="input_names has 3 names"):
        export(op32, tmp_path / "a.pt", input_names=["a", "b", "c"])
    assert not (tmp_path / "a.pt").exists()  # nothing written by a refusal
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    with pytest.raises(ExportError, match="not a TorchScript file"):
        read_metadata(tmp_path / "junk.pt")
    with pytest.raises(ExportError, match="--modes"):
        parse_modes("a,b")


def test_cli_refusals_are_one_line(models, tmp_path, capsys):
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "cv.pt")]) == 2
    err = capsys.readouterr().err
    assert "no such fit folder or model file" in err and err.count("\n") == 1
    _, op32, _ = models
    op32.save(tmp_path / "model.pt")
    assert main(["export", str(tmp_path / "model.pt"), "--modes", "9", "--out", "cv.pt"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "model.pt"), "--out", str(tmp_path / "cv.pt")]) == 0
    assert torch.jit.load(str(tmp_path / "cv.pt")).modes == [1]


def test_fit_folder_on_arrays_is_checked_on_its_data(tmp_path):
    """``dpnets export`` of a fit on a ``.npy`` file checks the file on 64 of its states;
    with the data moved away it says the file was not checked (it was silent)."""
    from dpnets import load

    np.save(tmp_path / "x.npy", _data()[:800])
    fit = tmp_path / "fit"
    args = ["fit", str(tmp_path / "x.npy"), "--epochs", "2", "--out", str(fit), "--quiet"]
    assert main(args) == 0
    out = tmp_path / "cv.pt"
    with warnings.catch_warnings(record=True) as seen:  # none of its own: it was checked
        warnings.simplefilter("always")
        assert main(["export", str(fit), "--modes", "1,2", "--out", str(out)]) == 0
    assert not [w for w in seen if "not checked" in str(w.message)]
    prec = read_metadata(out)["precision"]
    assert prec["checked_on"] == 64 and prec["dtype"] == "float32" and prec["error"] < 1e-4
    x = _data()[:800]
    got = torch.jit.load(str(out))(torch.tensor(x)).numpy()
    ref = load(fit / "model.pt").eigenfunctions(x).real[:, [1, 2]]
    assert np.all(np.abs(got - ref).max(0) / np.ptp(ref, 0) < 1e-5)
    (tmp_path / "x.npy").rename(tmp_path / "moved.npy")
    with pytest.warns(UserWarning) as caught:
        assert main(["export", str(fit), "--out", str(out)]) == 0
    assert read_metadata(out)["precision"]["checked_on"] == 0
    assert [str(w.message) for w in caught if "not checked" in str(w.message)] == [
        f"{out} was not checked against the model on any state: the fit's data "
        f"({tmp_path / 'x.npy'}) could not be read (moved or deleted?): its float32 "
        "precision was not measured; put the data back to check it"
    ]

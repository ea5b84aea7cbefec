#!/usr/bin/env bash
# End-to-end check of `dpnets export`'s plumed.dat under `plumed driver` (issue 33, item 4).
#
# Needs PLUMED (2.10+/2.11) built with its PYTORCH and OPES modules against the libtorch of
# the torch in dpnets' environment, e.g. for the CPU wheel of torch 2.13 (C++11 ABI):
#   T=$(python -c 'import torch,os;print(os.path.dirname(torch.__file__))')
#   ./configure --prefix=$HOME/plumed --enable-libtorch --enable-cxx=20 \
#     --enable-modules=+pytorch:+opes --disable-doc --disable-python \
#     CXXFLAGS="-O2 -D_GLIBCXX_USE_CXX11_ABI=1" CPPFLAGS="-I$T/include -I$T/include/torch/csrc/api/include" \
#     LDFLAGS="-L$T/lib -Wl,-rpath,$T/lib" && make -j && make install
# and dpnets with openmm and mdtraj. Not part of CI (PLUMED is not on PyPI).
#
# Usage: PLUMED=$HOME/plumed/bin/plumed PYTHON=.venv/bin/python benchmarks/plumed_check.sh [WORKDIR]
# (LD_LIBRARY_PATH must reach PLUMED's lib/ folder.) Exit status 0 when every check holds.
set -euo pipefail
export PLUMED=${PLUMED:-plumed} WORK=${1:-$(mktemp -d -t dpnets-plumed-XXXX)}
PYTHON=${PYTHON:-python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PLUMED" config has libtorch >/dev/null || { echo "$PLUMED: built without libtorch" >&2; exit 2; }
"$PLUMED" info --long-version
exec "$PYTHON" - <<'EOF'
import os, shutil, subprocess, sys
from pathlib import Path
import numpy as np, mdtraj as md, openmm, openmm.unit as u
from dpnets.systems.alanine import build_simulation, pdb_path

PLUMED, W = os.environ["PLUMED"], Path(os.environ["WORK"]).resolve()
RUN = W / "elsewhere"  # PLUMED runs here, not in the folder holding plumed.dat
W.mkdir(parents=True, exist_ok=True); RUN.mkdir(exist_ok=True)
ok = True

def check(name, cond, detail):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'} {name}: {detail}", flush=True)

def dpnets(*args, cwd=W):
    p = subprocess.run([sys.executable, "-m", "dpnets", *map(str, args)], cwd=cwd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"dpnets {' '.join(map(str, args))} failed:\n{p.stderr[-3000:]}")

def driver(text, traj, tag):
    d = RUN / tag; shutil.rmtree(d, ignore_errors=True); d.mkdir()
    (d / "in.dat").write_text(text)
    p = subprocess.run([PLUMED, "driver", "--plumed", "in.dat", "--mf_dcd", str(traj), "--natoms", "22",
                        "--timestep", "0.5"], cwd=d, capture_output=True, text=True)
    return p, d

# 1. all-atom alanine runs (dpnets' OpenMM settings, 400 K): 2 in each phi basin, 400 frames of 0.5 ps
full = md.load(str(pdb_path())); heavy_sel = full.topology.select("element != H")
full.save_pdb(str(W / "ala_full.pdb")); full.atom_slice(heavy_sel).save_pdb(str(W / "ala_heavy.pdb"))
phi_atoms = [int(a) for a in md.compute_phi(full)[0][0]]
def restrain(system):  # seeds the phi > 0 basin; switched off before the stored run
    f = openmm.CustomTorsionForce("0.5*k*d^2; d=min(dt,2*pi-dt); dt=abs(theta-1.0472); pi=3.1415926535")
    f.addGlobalParameter("k", 500.0); f.addTorsion(*phi_atoms, []); system.addForce(f)
runs = []
for seed in range(4):
    sim, _ = build_simulation(seed=seed, prepare=restrain)
    sim.context.setParameter("k", 500.0 if seed >= 2 else 0.0)
    openmm.LocalEnergyMinimizer.minimize(sim.context, 10.0, 500)
    sim.context.setVelocitiesToTemperature(400 * u.kelvin, seed + 1)
    sim.step(5000); sim.context.setParameter("k", 0.0)
    xyz = []
    for _ in range(400):
        sim.step(125)
        xyz.append(sim.context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(u.nanometer))
    t = md.Trajectory(np.array(xyz, np.float32), full.topology)
    t.save_dcd(str(W / f"full{seed}.dcd")); t.atom_slice(heavy_sel).save_dcd(str(W / f"heavy{seed}.dcd"))
    runs.append(t)
md.join(runs).save_dcd(str(W / "full.dcd"))
phi = md.compute_phi(md.join(runs))[1][:, 0]; psi = md.compute_psi(md.join(runs))[1][:, 0]

# 2. heavy-atom fits (relative paths, as typed), exported for the 22-atom engine system
heavy = sorted(str(p) for p in W.glob("heavy?.dcd"))
for feats in ("dihedrals", "distances"):
    dpnets("fit", *[Path(h).name for h in heavy], "--topology", "ala_heavy.pdb", "--features", feats,
           "--lag", "10", "--epochs", "10", "--seed", "0", "--quiet", "--out", f"fit-{feats}")
    dpnets("transform", W / f"fit-{feats}", *heavy, "--eigenfunctions", "--out", W / f"ef-{feats}.npz", cwd=RUN)
dpnets("export", "fit-dihedrals", "--topology", "ala_full.pdb", "--modes", "1,2", "--out", "tors/cv.pt")
dpnets("export", "fit-dihedrals", "--topology", "ala_full.pdb", "--temperature", "400", "--out", "t400/cv.pt")
dpnets("export", "fit-dihedrals", "--topology", "ala_full.pdb", "--double", "--out", "double/cv.pt")
dpnets("export", "fit-distances", "--topology", "ala_full.pdb", "--out", "dist/cv.pt")

def ref(feats):
    f = np.load(W / f"ef-{feats}.npz"); return np.concatenate([f[f"traj_{i}"].real for i in range(len(heavy))])

# (a), (c), distances: PLUMED's CV against dpnets transform, from another folder
for tag, feats, args in (("tors", "dihedrals", "cv.node-0,cv.node-1"), ("double", "dihedrals", "cv.node-0"),
                         ("dist", "distances", "cv.node-0")):
    text = (W / tag / "plumed.dat").read_text() + f"PRINT ARG={args} STRIDE=1 FILE=ALL FMT=%.9f\n"
    p, d = driver(text, W / "full.dcd", tag)
    if p.returncode:
        check(f"{tag}: plumed driver runs", False, p.stdout[-1500:]); continue
    got, want = np.loadtxt(d / "ALL")[:, 1:], ref(feats)
    for k in range(got.shape[1]):
        rng = np.ptp(want[:, k + 1]); err = np.abs(got[:, k] - want[:, k + 1]).max()
        check(f"{tag}: node-{k} = dpnets transform", err < 1e-5 * rng, f"max|diff| {err:.2e}, range {rng:.3f}")

# (d) TORSION atoms on the 22-atom system = mdtraj's phi/psi; derivatives = autograd
import torch
text = (W / "tors/plumed.dat").read_text()
text += "PRINT ARG=phi1,psi1 STRIDE=1 FILE=ANG FMT=%.9f\nDUMPDERIVATIVES ARG=cv.node-0 STRIDE=1 FILE=DER FMT=%.9f\n"
p, d = driver(text, W / "full.dcd", "torsion")
ang = np.loadtxt(d / "ANG")[:, 1:]
wrap = lambda x: np.abs((x + np.pi) % (2 * np.pi) - np.pi)
for k, (name, want) in enumerate((("phi", phi), ("psi", psi))):
    err = wrap(ang[:, k] - want).max()
    check(f"TORSION {name} = mdtraj on all-atom frames", err < 1e-5, f"max|diff| {err:.2e} rad")
x = torch.tensor(ang, dtype=torch.float32, requires_grad=True)
(g,) = torch.autograd.grad(torch.jit.load(str(W / "tors/cv.pt"))(x)[:, 0].sum(), x)
err = np.abs(np.loadtxt(d / "DER")[:, 2].reshape(-1, 2) - g.numpy()).max()
check("PYTORCH_MODEL derivatives = autograd", err < 1e-5, f"max|diff| {err:.2e}")

# (b) the commented METAD / OPES_METAD sketches
for which, out in (("metad", "HILLS"), ("opes", "KERNELS")):
    for tag, temp_set in (("tors", False), ("t400", True)):
        src = (W / tag / "plumed.dat").read_text()
        line = next(l for l in src.splitlines() if l.startswith(f"# {which}:"))
        text = src.replace(line, line[2:]) + f"PRINT ARG={which}.bias STRIDE=1 FILE=BIAS\n"
        p, d = driver(text, W / "full.dcd", f"{which}-{tag}")
        if not temp_set:
            msg = next((l for l in p.stdout.splitlines() if "ERROR" in l), "")
            check(f"{which} sketch refused while TEMP is the placeholder", p.returncode != 0 and "TEMP" in msg, msg.strip())
        else:
            n = len(np.atleast_2d(np.loadtxt(d / out))) if (d / out).exists() else 0
            check(f"{which} sketch (--temperature 400) runs and deposits", p.returncode == 0 and n > 0,
                  f"rc {p.returncode}, {n} entries in {out}")
sys.exit(0 if ok else 1)
EOF

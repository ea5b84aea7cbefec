"""Export the alanine-dipeptide ensemble of `dpnets reproduce alanine-dipeptide` (the cached
OpenMM runs) as .xtc files with a heavy-atom .pdb, the way MD users hold their data."""

import sys
from pathlib import Path

import mdtraj as md
import numpy as np

from dpnets.experiments.alanine_dipeptide import CONFIG, ensemble_runs
from dpnets.systems.alanine import pdb_path, simulate_alanine_ensemble

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
runs, common = ensemble_runs(CONFIG)
trajs = simulate_alanine_ensemble(runs, workers=1, **common)
full = md.load(str(pdb_path()))
heavy = full.atom_slice(full.topology.select("element != H"))
heavy.save_pdb(str(out / "alanine-heavy.pdb"))
dt = float(common["frame_interval_ps"])
for i, t in enumerate(trajs):
    x = np.asarray(t.positions, dtype=np.float32) / 10.0  # Å -> nm
    md.Trajectory(x, heavy.topology, time=np.arange(len(x)) * dt).save_xtc(
        str(out / f"run{i:02d}.xtc")
    )
print(len(trajs), "trajectories written to", out)

"""Numbers that a refactoring must not move (issue 34): fitted arrays, forecasts, scores,
saved files and validation results of a few fits, written to one ``.npz``; ``diff`` prints
the largest difference per array between two such files. Run it on two checkouts:

    PYTHONPATH=/path/to/before/src python benchmarks/compare_numerics.py run before.npz
    PYTHONPATH=src python benchmarks/compare_numerics.py run after.npz
    python benchmarks/compare_numerics.py diff before.npz after.npz
    PYTHONPATH=src python benchmarks/compare_numerics.py --smoke   # run twice here, diff: 0

The fits: ``TransferOperator`` on monomials (``reversible`` False / True / "reweight"), on
indicators of a Markov chain, by ``partial_fit``, on DPNet features; ``Generator`` (Itô and
Dirichlet forms, weighted samples); ``ck_test`` (also reweighted), ``implied_timescales``
(fixed features, DPNet features, the composite), ``bootstrap_spectrum`` (also with
``refit_features``, and on blocks of one trajectory), ``cross_validate`` and the
scikit-learn scorer, all seeded.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

ATTRS = (
    "operator_",
    "cx_",
    "cxy_",
    "cy_",
    "cx_pinv_",
    "state_coef_",
    "features_mean_",
    "features_mean_y_",
    "feature_shift_",
    "feature_scale_",
    "eigvals_",
    "left_eigvecs_",
    "right_eigvecs_",
    "reweighting_coef_",
    "cxd_",
    "partial_trace_",
    "sample_weight_",
)


def diff(before: str, after: str) -> float:
    """Print the largest absolute difference of every array; returns the largest of all
    (inf where shapes or the positions of non-finite values differ)."""
    a, b = np.load(before), np.load(after)
    if set(a.files) != set(b.files):
        print("arrays in one file only:", sorted(set(a.files) ^ set(b.files)))
        return float("inf")
    worst = 0.0
    for key in sorted(a.files):
        x, y = a[key], b[key]
        if x.shape != y.shape:
            print(f"{key:50s} shapes {x.shape} / {y.shape}")
            worst = float("inf")
            continue
        same = np.array_equal(np.isfinite(x), np.isfinite(y)) and np.array_equal(
            x[~np.isfinite(x)], y[~np.isfinite(y)], equal_nan=True
        )
        fin = np.isfinite(x) & np.isfinite(y)
        d = float(np.max(np.abs(x[fin] - y[fin]), initial=0.0)) if same else float("inf")
        worst = max(worst, d)
        print(f"{key:50s} {d:.3e}")
    print(f"largest difference over {len(a.files)} arrays: {worst:.3e}")
    return worst


def run(path: str) -> None:  # noqa: PLR0915 - one list of cases
    import dpnets
    from dpnets import DPNet, Generator, TransferOperator, load
    from dpnets.base import vamp2_scorer
    from dpnets.baselines import MonomialFeatures
    from dpnets.ito import SDE
    from dpnets.systems import MarkovChain, OrnsteinUhlenbeck
    from dpnets.validation import bootstrap_spectrum, ck_test, cross_validate, implied_timescales

    print(dpnets.__file__)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    out: dict[str, np.ndarray] = {}
    tmp = Path(tempfile.mkdtemp())
    p = np.array([[0.90, 0.09, 0.01], [0.06, 0.90, 0.04], [0.01, 0.07, 0.92]])
    chain = [MarkovChain(p).sample(400, seed=s)[:, None].astype(float) for s in range(6)]
    ou = [OrnsteinUhlenbeck(dt=0.1).sample(600, seed=s) for s in range(5)]
    ou_far = [t + 50.0 for t in ou]

    def one_hot(s: np.ndarray) -> np.ndarray:
        return np.eye(3)[np.asarray(s).reshape(-1).astype(int)]

    def record(name: str, m, x: np.ndarray) -> None:
        for a in ATTRS:
            if getattr(m, a, None) is not None:
                out[f"{name}/{a}"] = np.asarray(getattr(m, a))
        scalars = [float(m.constant_), m.n_samples_, m.n_features_, m.cx_rank_]
        out[f"{name}/scalars"] = np.array(scalars)
        out[f"{name}/its"] = np.asarray(m.implied_timescales())
        out[f"{name}/predict"] = np.asarray(m.predict(x[:20], t=[1, 3]))
        out[f"{name}/eigf"] = np.asarray(m.eigenfunctions(x[:20]))
        if not isinstance(m, Generator):
            for kind in ("vamp1", "vamp2", "vampE", "projection"):
                out[f"{name}/score_{kind}"] = np.array(m.score(x, kind=kind))
            out[f"{name}/stationary"] = np.asarray(m.stationary_weights()[:50])
        m.save(tmp / f"{name}.pt")
        raw = torch.load(tmp / f"{name}.pt", weights_only=True)
        for k, v in raw["tensors"].items():
            out[f"{name}/file/{k}"] = v.numpy()
        again = load(tmp / f"{name}.pt", features=m.features_)
        out[f"{name}/loaded_eig"] = np.asarray(again.eigvals_)
        out[f"{name}/loaded_predict"] = np.asarray(again.predict(x[:20], t=2))

    for rev in (False, True, "reweight"):
        m = TransferOperator(MonomialFeatures(3), lag=2, dt=0.1, reversible=rev).fit(ou_far)
        record(f"ou_mono_{rev}", m, np.concatenate(ou_far))
    for rev in (False, True):
        m = TransferOperator(one_hot, reversible=rev).fit(chain)
        record(f"chain_onehot_{rev}", m, np.concatenate(chain))
    record("chain_noconst", TransferOperator(one_hot, constant=False).fit(chain), chain[0])
    m = TransferOperator(MonomialFeatures(2))
    for t in ou:
        m.partial_fit(t)
    record("ou_partial", m, np.concatenate(ou))
    net = DPNet(r=2, lag=2, epochs=3, batch_size=256, seed=0, progress=False).fit(ou)
    out["dpnet/score"] = np.array(net.score(ou[0]))
    out["dpnet/evaluate"] = np.array(net.evaluate(ou[0]))
    for rev in (False, True):
        record(f"ou_dpnet_{rev}", TransferOperator(net, reversible=rev).fit(ou), ou[1])
    sde = SDE(lambda x: -x, 2**0.5, reversible=True)
    xs = np.random.default_rng(0).standard_normal((2000, 1))
    for form, sym in (("ito", False), ("dirichlet", True)):
        g = Generator(
            lambda x: torch.cat([x, x**2 - 1, x**3], dim=1), sde, form=form, symmetrize=sym
        )
        record(f"gen_{form}", g.fit(xs, sample_weight=np.linspace(0.5, 1.5, 2000)), xs)

    curves = ("predictions", "estimates", "predictions_lower", "estimates_upper")
    op = TransferOperator(one_hot, lag=1).fit(chain)
    ck = ck_test(op, chain, [1, 2, 4], one_hot, n_bootstrap=8, seed=2)
    out.update({f"ck/{f}": getattr(ck, f) for f in curves})
    op = TransferOperator(one_hot, lag=1, reversible="reweight").fit(chain)
    ck = ck_test(op, chain, [1, 2], one_hot, n_bootstrap=4, seed=2)
    out.update({f"ck_reweight/{f}": getattr(ck, f) for f in curves})
    for name, est, data in (
        ("its_chain", TransferOperator(one_hot, constant=False), chain),
        ("its_mono_rev", TransferOperator(MonomialFeatures(3), reversible=True), ou_far),
        ("its_dpnet", TransferOperator(net), ou),
        ("its_composite", TransferOperator(DPNet(r=2, epochs=2, seed=0, progress=False)), ou),
    ):
        res = implied_timescales(est, data, [1, 2, 5], k=2, n_bootstrap=4, seed=3)
        out[f"{name}/ts"], out[f"{name}/samples"] = res.timescales, res.samples
    model = TransferOperator(MonomialFeatures(3), lag=2, dt=0.1).fit(ou)
    out["spectrum"] = bootstrap_spectrum(model, ou, k=3, n_bootstrap=10, seed=7).samples
    dp = TransferOperator(net, lag=2).fit(ou)
    spec = bootstrap_spectrum(dp, ou, k=2, n_bootstrap=3, seed=7, refit_features=True)
    out["spectrum_refit"] = spec.samples
    single = np.concatenate(chain)
    op = TransferOperator(one_hot, reversible=True).fit(single)
    out["spectrum_blocks"] = bootstrap_spectrum(op, single, k=3, n_bootstrap=6, seed=1).samples
    for kind in ("vamp1", "vamp2", "vampE"):
        mono = TransferOperator(MonomialFeatures(2))
        out[f"cv/{kind}"] = cross_validate(mono, ou, lag=2, cv=5, kind=kind, seed=0)
        rev = TransferOperator(one_hot, reversible=True)
        out[f"cv_blocks/{kind}"] = cross_validate(rev, single, lag=1, cv=3, kind=kind)
    out["cv_dpnet"] = cross_validate(TransferOperator(net), ou, lag=2, cv=5, seed=0)
    out["scorer"] = np.array(vamp2_scorer(model, ou[0]))
    np.savez(path, **out)
    print(f"{len(out)} arrays written to {path}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--smoke"]:  # the seeded runs reproduce within one checkout
        with tempfile.TemporaryDirectory() as tmp:
            first, second = f"{tmp}/first.npz", f"{tmp}/second.npz"
            run(first)
            run(second)
            worst = diff(first, second)
        print(f"largest difference between two runs: {worst:.3g}")
        sys.exit(0 if worst == 0 else 1)
    if len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(0 if diff(sys.argv[2], sys.argv[3]) <= 1e-12 else 1)
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(sys.argv[2])
        sys.exit(0)
    sys.exit(__doc__)

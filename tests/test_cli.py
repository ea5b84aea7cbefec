import numpy as np

import dpnets
from dpnets.cli import main


def test_demo_runs_and_saves(tmp_path, capsys):
    out = tmp_path / "demo.pt"
    assert (
        main(["demo", "--out", str(out), "--samples", "5000", "--epochs", "2", "--no-progress"])
        == 0
    )
    text = capsys.readouterr().out
    assert "| 4 |" in text and "exp(-k dt)" in text
    # the constant mode (k = 0) reports an infinite timescale, never a fake finite one
    row0 = next(ln for ln in text.splitlines() if ln.startswith("| 0 |"))
    assert row0.split("|")[5].strip() == "inf" and row0.split("|")[2].strip() == "1.0000"
    net = dpnets.load(out)
    assert net.transform(np.zeros((3, 1))).shape == (3, 4)


def test_reproduce_experiment_that_fails_to_import(monkeypatch, capsys, tmp_path):
    """A registered experiment whose module cannot be imported (a missing dependency): exit
    status 2 and one line naming the experiment, its module and the cause, no traceback."""
    import sys

    monkeypatch.setitem(sys.modules, "dpnets.experiments.alanine_sweep", None)  # import fails
    assert main(["reproduce", "alanine-r-lag", "--quick", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(
        "dpnets: error: experiment 'alanine-r-lag' cannot be imported "
        "(dpnets.experiments.alanine_sweep): "
    )


def test_reproduce_unregistered_name_is_refused_by_argparse(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "no-such-experiment"])
    assert exc.value.code == 2
    assert "invalid choice: 'no-such-experiment'" in capsys.readouterr().err


def test_reproduce_workers_only_where_the_experiment_takes_them(capsys):
    """--workers reaches experiments whose run() takes it; elsewhere a one-line error."""
    assert main(["reproduce", "logistic-map", "--quick", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "does not take workers" in err and "logistic-map" in err


def test_reproduce_engine_reaches_the_alanine_enhanced_sampling_only(capsys, tmp_path):
    """--engine openmm-torch goes to enhanced-sampling-alanine, which says at once (before
    any simulation) where OpenMM-Torch is missing; elsewhere a one-line refusal."""
    import importlib.util

    assert main(["reproduce", "logistic-map", "--quick", "--engine", "openmm-torch"]) == 2
    err = capsys.readouterr().err
    assert "does not take engine" in err and "logistic-map" in err
    if importlib.util.find_spec("openmmtorch") is None:
        argv = ["reproduce", "enhanced-sampling-alanine", "--quick", "--engine", "openmm-torch"]
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "needs OpenMM-Torch" in err
        assert not (tmp_path / "out").exists()


def test_reproduce_alanine_r_lag_is_registered_with_the_cli_options(monkeypatch, capsys, tmp_path):
    """The r x lag sweep is its own experiment; it reads the cache only, and a cache miss is
    one line naming the run that fills it (nothing is simulated or trained)."""
    import inspect

    from dpnets.experiments import EXPERIMENTS
    from dpnets.experiments.alanine_sweep import run

    assert EXPERIMENTS["alanine-r-lag"][0] == "dpnets.experiments.alanine_sweep"
    options = {"quick", "seeds", "out", "device", "progress", "workers"}
    assert options <= set(inspect.signature(run).parameters)
    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path / "empty"))
    argv = ["reproduce", "alanine-r-lag", "--quick", "--seeds", "1", "--workers", "2"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in the cache" in err
    assert "run `dpnets reproduce alanine-dipeptide --quick` first" in err


def test_every_option_says_what_it_does_and_its_default():
    """Every option of every subcommand has a sentence and states its default (or that it is
    required); every positional argument says what it is."""
    import argparse

    from dpnets.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, cmd in sub.choices.items():
        for action in cmd._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = action.help or ""
            if not action.option_strings:  # positional
                if len(text.split()) < 3:
                    missing.append(f"{name} {action.dest}: no description")
            elif len(text.split()) < 3 or not ("default" in text or "required" in text):
                missing.append(f"{name} {action.option_strings[0]}: {text!r}")
    assert not missing, "\n".join(missing)


def test_a_fit_option_is_defined_in_one_place():
    """Issue 34: DEFAULT_CONFIG, the config-file checks, the ``dpnets fit`` option (its help
    and default) and the estimator parameter all derive from ``fitfolder.FIT_OPTIONS``."""
    import argparse

    from dpnets.cli import _fit_config, _parser
    from dpnets.fitfolder import DEFAULT_CONFIG, FIT_OPTIONS, estimator_params

    keys = {(o.table, o.key) for o in FIT_OPTIONS}
    assert keys == {(t, k) for t, table in DEFAULT_CONFIG.items() for k in table}
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = {a.dest: a for a in sub.choices["fit"]._actions}
    for o in FIT_OPTIONS:
        assert DEFAULT_CONFIG[o.table][o.key] == o.default
        action = actions["data" if o.cli.get("positional") else o.key]
        if action.option_strings:
            assert action.option_strings[0] == "--" + o.key.replace("_", "-")
            shown = str(o.default).lower() if isinstance(o.default, bool) else str(o.default)
            assert f"default {shown}" in action.help or "default:" in action.help, o.key
    args = sub.choices["fit"].parse_args(
        ["a.npy", "--out", "o", "--stride", "3", "--gamma", "0.5", "--score", "vamp1"]
        + ["--reversible", "reweight", "--keys", "x", "y"]
    )
    config = _fit_config(args)
    expected = {"paths": ["a.npy"], "stride": 3, "keys": ["x", "y"]}
    assert config["data"] == {**DEFAULT_CONFIG["data"], **expected}
    model = config["model"]
    assert (model["gamma"], model["objective"], model["reversible"]) == (0.5, "vamp1", "reweight")
    assert estimator_params(model, "DPNet") == {
        "objective": "vamp1",
        "gamma": 0.5,
        "lr": DEFAULT_CONFIG["model"]["lr"],
        "batch_size": DEFAULT_CONFIG["model"]["batch_size"],
        "epochs": DEFAULT_CONFIG["model"]["epochs"],
        "seed": 0,
    }
    assert estimator_params(model, "TransferOperator") == {"reversible": "reweight"}


def test_a_config_file_value_is_checked_against_its_options_range(tmp_path):
    import pytest

    from dpnets.fitfolder import WorkflowError, load_config

    for line, match in (
        ("[data]\nstride = 0\n", r"\[data\] stride = 0: stride must be an integer >= 1"),
        ("[model]\nlr = 0.0\n", r"\[model\] lr = 0.0: lr must be in \(0"),
        ("[model]\nbatch_size = 1\n", r"batch_size must be an integer >= 2"),
    ):
        (tmp_path / "c.toml").write_text(line)
        with pytest.raises(WorkflowError, match=match):
            load_config(tmp_path / "c.toml")


def test_a_fit_that_cannot_run_or_diverges_says_so_in_one_line(tmp_path, capsys):
    """Too few frames after --stride (a lag as long as the data, or fewer pairs than the
    features), and a training that diverges (FloatingPointError): exit status 2 and one
    line naming the options to change, never a traceback."""
    rng = np.random.default_rng(0)
    path = tmp_path / "x.npy"
    np.save(path, np.cumsum(rng.standard_normal((600, 2)), axis=0))
    fit = ["fit", str(path), "--quiet", "--epochs", "3", "--out", str(tmp_path / "f")]
    assert main([*fit, "--stride", "600"]) == 2
    assert capsys.readouterr().err == (
        "dpnets: error: --lag 1 must be at least 1 and shorter than the longest trajectory "
        "(1 frames after --stride 600); use a smaller --stride\n"
    )
    assert main([*fit, "--stride", "150"]) == 2
    assert capsys.readouterr().err == (
        "dpnets: error: 3 lagged pairs at --lag 1 (4 frames after --stride 150) for --dim 4 "
        "learned features and the constant: too few to fit; use longer or more "
        "trajectories, a smaller --stride, a shorter --lag or a smaller --dim\n"
    )
    assert main([*fit, "--lr", "10000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpnets: error: training diverged") and err.count("\n") == 1

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

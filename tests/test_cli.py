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


def test_reproduce_unknown_experiment_module(monkeypatch, capsys):
    """A registered name whose module is absent: exit status 2 and one line, no traceback
    (argparse accepts the name: the choices are read from the registry at each call)."""
    from dpnets import experiments

    module = "dpnets.experiments._no_such_module"
    monkeypatch.setitem(experiments.EXPERIMENTS, "not-yet", (module, "placeholder"))
    assert "not-yet" not in experiments.available()
    assert main(["reproduce", "not-yet", "--quick", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "dpnets: error: experiment 'not-yet' is not implemented yet\n"
    assert captured.out == ""


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

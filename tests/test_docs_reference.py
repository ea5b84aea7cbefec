"""The API reference (docs/api/*.rst) lists every public name of the documented modules.

A static check of the reference sources: it parses the ``autosummary`` blocks (and
``auto*`` directives) under each ``currentmodule`` and needs no Sphinx, so it runs with the
rest of the test suite. Adding a name to a module's ``__all__`` without adding it to the
reference fails here, before the documentation build would silently leave it out.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
API = DOCS / "api"

#: modules whose every ``__all__`` name must be in the reference
MODULES = [
    "dpnets",
    "dpnets.scores",
    "dpnets.heldout",
    "dpnets.estimation",
    "dpnets.diagnostics",
    "dpnets.validation",
    "dpnets.forecasting",
    "dpnets.baselines",
    "dpnets.plot",
    "dpnets.nn",
    "dpnets.systems",
    "dpnets.datasets",
    "dpnets.biased",
    "dpnets.export",
    "dpnets.engines",
]

_DIRECTIVE = re.compile(r"^(\s*)\.\. ([\w:-]+)::\s*(\S*)\s*$")


def documented_names(files: list[Path]) -> set[str]:
    """Fully qualified names the reference sources document.

    ``.. currentmodule:: m`` sets the module; names listed in an ``autosummary`` block, or
    given to an ``auto*`` directive (``autoclass``, ``autofunction``, ``autodata``...),
    count as ``m.name``; ``.. automodule:: m`` documents the module ``m`` itself.
    """
    names: set[str] = set()
    for path in files:
        module = None
        in_summary = False
        for line in path.read_text(encoding="utf-8").splitlines():
            match = _DIRECTIVE.match(line)
            if match:
                indent, directive, arg = match.groups()
                in_summary = directive == "autosummary"
                if directive in ("currentmodule", "py:currentmodule"):
                    module = arg
                elif directive == "automodule":
                    names.add(arg)
                elif directive.startswith("auto") and directive != "autosummary" and arg:
                    names.add(arg if "." in arg or module is None else f"{module}.{arg}")
                continue
            if not in_summary:
                continue
            stripped = line.strip()
            if not stripped or stripped.startswith(":"):  # blank line or a directive option
                continue
            if not line.startswith((" ", "\t")):  # the block ended
                in_summary = False
                continue
            entry = stripped.lstrip("~")
            names.add(entry if module is None else f"{module}.{entry}")
    return names


def _reference_files() -> list[Path]:
    return sorted(API.glob("*.rst"))


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_parser_reads_autosummary_blocks(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text(
        ".. currentmodule:: pkg\n\n.. autosummary::\n   :toctree: generated\n\n   A\n   f\n\n"
        "Text\n\n.. autodata:: VALUE\n\n.. automodule:: pkg.sub\n   :no-members:\n"
    )
    assert documented_names([page]) == {"pkg.A", "pkg.f", "pkg.VALUE", "pkg.sub"}


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_the_reference(module):
    if not _available(module):
        pytest.skip(f"{module} does not exist in this tree")
    mod = importlib.import_module(module)
    documented = documented_names(_reference_files())
    missing = [n for n in mod.__all__ if f"{module}.{n}" not in documented]
    assert not missing, f"{module}.__all__ names missing from docs/api/*.rst: {missing}"


def test_reference_names_exist():
    """Every name the reference lists resolves (no stale entries after a rename)."""
    stale = []
    for name in sorted(documented_names(_reference_files())):
        module, _, attr = name.rpartition(".")
        if _available(name):
            continue
        if not module or not hasattr(importlib.import_module(module), attr):
            stale.append(name)
    assert not stale, f"docs/api/*.rst lists names that do not exist: {stale}"


def test_every_reference_page_is_in_the_index():
    index = (API / "index.md").read_text(encoding="utf-8")
    pages = {p.stem for p in _reference_files()}
    listed = set(re.findall(r"^(\w+)\s*$", index, flags=re.MULTILINE))
    assert pages <= listed, f"reference pages not in docs/api/index.md: {pages - listed}"

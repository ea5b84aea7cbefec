"""Sphinx configuration of the dpnets documentation.

Build (warnings are errors; tutorials are executed, with a cache under ``docs/_build``)::

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
# the tutorials' kernels are separate processes: they inherit these
os.environ.setdefault("OMP_NUM_THREADS", "1")  # small networks train fastest on one thread
os.environ.pop("MPLBACKEND", None)  # the kernels draw inline (their figures are the pages')
os.environ.setdefault("DPNETS_CACHE", str(HERE / "_build" / ".dpnets_cache"))

import dpnets  # noqa: E402

project = "dpnets"
author = "dpnets developers"
copyright = "2024-2026, dpnets developers"
version = release = dpnets.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinxcontrib.bibtex",
    "myst_nb",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "README.md"]
templates_path = ["_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}

# --- API reference -------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"  # the numpy docstrings state the types
autodoc_class_signature = "mixed"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True
napoleon_preprocess_types = True
add_module_names = False

bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "plain"
bibtex_reference_style = "author_year"

# --- MyST and notebooks --------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "cache"
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_execution_timeout = 900
nb_execution_in_temp = True  # files a tutorial writes never land in docs/
nb_execution_raise_on_error = True  # a broken tutorial fails the build
nb_execution_show_tb = True
nb_merge_streams = True

# --- HTML ----------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"dpnets {release}"
html_static_path = ["_static"]


def _attribute_comment(app, what, name, obj, options, lines):
    """Document a re-exported constant by its ``#:`` comment where it is defined.

    ``dpnets.nn.ACTIVATIONS`` is defined in ``dpnets.nn.mlp``: autodoc looks for its comment
    in ``dpnets.nn`` and would otherwise show the docstring of ``dict``.
    """
    if what != "data" or not lines or "\n".join(lines).strip() != (type(obj).__doc__ or "").strip():
        return
    from sphinx.pycode import ModuleAnalyzer

    package, _, attr = name.rpartition(".")
    for modname in sorted(m for m in sys.modules if m.startswith(package + ".")):
        try:
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except Exception:  # noqa: BLE001 - compiled or source-less modules
            continue
        if ("", attr) in docs and getattr(sys.modules[modname], attr, None) is obj:
            lines[:] = list(docs[("", attr)])
            return
    lines[:] = []


def setup(app):
    app.connect("autodoc-process-docstring", _attribute_comment)

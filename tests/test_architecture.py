"""The module graph of ``src/dpnets`` (issue 14): no import cycle, counting imports inside
function bodies too, and no module importing another module's private names."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (SRC / "dpnets").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]):
    """(imported module, imported names) for every import statement, at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in mods:  # "from dpnets import io" imports the module dpnets.io
                    yield sub, []
                else:
                    yield target, [alias.name]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for target, _ in _imports(name, path, mods):
            if target in mods and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    graph = _graph()
    assert "dpnets.io" in graph  # the walk sees the package
    assert _cycles(graph) == []


def test_persistence_is_at_the_bottom_and_knows_no_concrete_model():
    graph = _graph()
    assert graph["dpnets.io"] <= {"dpnets.nn.registry", "dpnets.exceptions", "dpnets.distributed"}
    # the process-group helpers (rank 0 writes) are a leaf: they import no dpnets module
    assert not graph.get("dpnets.distributed")


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    offenders = []
    for name, path in mods.items():
        for target, names in _imports(name, path, mods):
            if not target.startswith("dpnets"):
                continue
            offenders += [
                f"{name}: {target}.{n}"
                for n in names
                if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))
            ]
        text = path.read_text()
        for mod in (
            "io",
            "operators",
            "representation",
            "training",
            "scores",
            "states",
            "pairs",
            "batching",
            "training_source",
            "standardize",
        ):
            if f"{mod}._" in text.replace("__", ""):
                offenders.append(f"{name}: uses {mod}._...")
    assert offenders == []


#: the layers of the package, bottom first (ARCHITECTURE.md): a module imports only from its
#: own layer or the ones below
LAYERS = [
    [
        "exceptions",
        "distributed",
        "params",
        "linalg",
        "base",
        "nn.registry",
        "parallel",
        "diagnostics",
    ],
    [
        "io",
        "states",
        "pairs",
        "batching",
        "training_source",
        "standardize",
        "moments",
        "nn",
        "nn.*",
        "scores",
        "heldout",
        "ito",
        "biased",
    ],
    ["training", "spectral", "estimation", "generator_learning"],
    ["representation", "operators", "generator", "baselines", "baselines.*"],
    [
        "validation",
        "resampling",
        "forecasting",
        "timescales",
        "chapman_kolmogorov",
        "metastable",
        "cross_validation",
        "plot",
        "datasets",
        "file_errors",
        "md_files",
        "md_features",
        "systems",
        "systems.*",
        "export",
        "engines",
        "fitfolder",
    ],
    ["", "workflow", "experiments", "experiments.*", "cli", "__main__"],
]


def _layer(module: str) -> int:
    name = module.removeprefix("dpnets").removeprefix(".")
    for k, members in enumerate(LAYERS):
        for m in members:
            if name == m or (m.endswith(".*") and name.startswith(m[:-1])):
                return k
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and ARCHITECTURE.md")


def test_no_import_from_a_lower_layer_to_a_higher_one():
    graph = _graph()
    up = [
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
        for a, targets in graph.items()
        for b in targets
        if _layer(a) < _layer(b)
    ]
    assert up == []
    assert all(_layer(m) >= 0 for m in _modules())  # every module has a layer


#: no class in ``src/dpnets`` longer than this (issue 43: one room per concept)
MAX_CLASS_LINES = 450


def test_no_class_is_longer_than_the_bar():
    long = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{name}.{node.name}"] = lines
    assert not long, f"classes longer than {MAX_CLASS_LINES} lines: {long}"

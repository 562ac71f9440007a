"""All of src/fleetgen imports without a circle, at every level: each module, and each folder, stands on those below it.

The graph is read from the source with ast (every import, also those inside functions and under
TYPE_CHECKING), so an import hidden in a function to dodge a circle at run time still counts as the
circle it is. A folder is one room among its siblings (as farm-studio draws it): two sibling folders
that import each other, through any of their modules, are a circle too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fleetgen

SRC = Path(fleetgen.__file__).parent


def module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports (`from pkg
    import name` counts as pkg.name when that is a module)."""
    files = {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for t in targets:
                while t and t not in files:  # `import fleetgen.fleet.x.y` names module x.y or x
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def room_graphs(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """Package -> the graph among its direct children (a module, or a sub-package with all inside it)."""
    packages = {m.rpartition(".")[0] for m in graph} | {m for m in graph if any(k.startswith(m + ".") for k in graph)}
    rooms: dict[str, dict[str, set[str]]] = {p: {} for p in packages if p}

    def child(pkg: str, mod: str) -> str | None:
        if not mod.startswith(pkg + "."):
            return None
        return pkg + "." + mod[len(pkg) + 1 :].split(".")[0]

    for src, targets in graph.items():
        for pkg, g in rooms.items():
            a = child(pkg, src)
            if a is None:
                continue
            g.setdefault(a, set())
            for t in targets:
                b = child(pkg, t)
                if b is not None and b != a:
                    g[a].add(b)
                    g.setdefault(b, set())
    return rooms


def faces_imported_from_inside(graph: dict[str, set[str]], packages: set[str]) -> list[str]:
    """A module that imports a package it stands in (its __init__): an arrow back up to the face."""
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if t in packages and m.startswith(t + "."))


def test_src_has_no_import_circle_at_any_level():
    graph = import_graph(SRC, "fleetgen")
    assert "fleetgen.fleet.engines.base" in graph and graph["fleetgen.generate.runner"]  # the walk saw the tree
    assert cycles(graph) == []
    circles = {pkg: c for pkg, g in room_graphs(graph).items() if (c := cycles(g))}
    assert circles == {}


def test_no_module_imports_a_package_it_stands_in():
    graph = import_graph(SRC, "fleetgen")
    packages = {m for m in graph if any(k.startswith(m + ".") for k in graph)}
    assert faces_imported_from_inside(graph, packages) == []


def test_export_and_report_read_the_row_format_not_generate():
    graph = import_graph(SRC, "fleetgen")
    reach = sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        for t in ts
        if m.startswith(("fleetgen.export", "fleetgen.report")) and t.startswith("fleetgen.generate")
    )
    assert reach == []


def test_sibling_folders_that_import_each_other_are_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    for d in ("pkg", "pkg/low", "pkg/high"):
        (tmp_path / d).mkdir(exist_ok=True)
        (tmp_path / d / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from pkg.high import b\n")  # lazy, still an arrow
    (pkg / "high" / "b.py").write_text("")
    (pkg / "high" / "c.py").write_text("from pkg.low import a\n")
    graph = import_graph(pkg, "pkg")
    assert cycles(graph) == []  # no module circle: a -> b, c -> a
    assert {p: cycles(g) for p, g in room_graphs(graph).items() if cycles(g)} == {"pkg": [["pkg.high", "pkg.low"]]}
    (pkg / "low" / "d.py").write_text("import pkg\n")
    graph = import_graph(pkg, "pkg")
    assert faces_imported_from_inside(graph, {"pkg", "pkg.low", "pkg.high"}) == ["pkg.low.d -> pkg"]


def test_the_walk_finds_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from pkg import a\n")  # imports into the circle, is not part of it
    assert cycles(import_graph(pkg, "pkg")) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def private_reaches(root: Path, package: str) -> list[str]:
    """`from m import _x` or `m._x` where m is another module of `package`: a private name used across modules."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        modules: set[str] = set()  # local names bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        found.append(f"{path.name}: from {node.module} import {a.name}")
                    modules.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                modules.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith(package))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.name}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_ones_private_names():
    assert private_reaches(SRC, "fleetgen") == []


def test_a_private_reach_is_seen(tmp_path):
    (tmp_path / "a.py").write_text("from pkg import b\nfrom pkg.c import _hidden\nb._redact([], None)\nb.public()\n")
    assert private_reaches(tmp_path, "pkg") == ["a.py: from pkg.c import _hidden", "a.py: b._redact"]


# Private names the tests may use: other libraries' (psutil's boot-time source, aiohttp's bound socket)
# and the tests' own stand-in server's, which its subclasses extend.
NOT_FLEETGEN = {"psutil._psplatform", "site._server", "super()._chat"}


def private_uses(root: Path) -> list[str]:
    """`from fleetgen... import _x`, and `x._y` on anything but self or cls: a private name reached from outside."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fleetgen"):
                found += [
                    f"{path.name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and ast.unparse(node) not in NOT_FLEETGEN
            ):
                found.append(f"{path.name}: {ast.unparse(node)}")
    return found


def test_the_tests_use_fleetgen_through_public_names():
    assert private_uses(Path(__file__).parent) == []


def test_a_private_use_in_a_test_is_seen(tmp_path):
    (tmp_path / "t.py").write_text("from fleetgen.x import _y\nd._wide\nself._ok\npsutil._psplatform\n")
    assert private_uses(tmp_path) == ["t.py: from fleetgen.x import _y", "t.py: d._wide"]

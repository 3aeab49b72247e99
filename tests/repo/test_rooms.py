"""The rooms of the code say what they are, and their imports point one way.

Every package says in its `__init__.py` docstring what question it answers, and no module
imports, even for type checking only (`if TYPE_CHECKING:`), a module that imports it back
through any chain: an arrow between two modules points one way (docs/architecture.md).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.paths import ROOT

# The folders of the installed package `hpcdispatch` (pyproject.toml, [tool.setuptools]
# package-dir): `hpcdispatch/` is the package root, the others its subpackages.
FOLDERS = {
    "hpcdispatch": "hpcdispatch",
    "server": "hpcdispatch.server",
    "client": "hpcdispatch.client",
    "sim_adapter": "hpcdispatch.sim_adapter",
    "slurm_bridge": "hpcdispatch.slurm_bridge",
}
SENTENCE_END = re.compile(r"[\w`)][.!?](\s|$)")


def project_modules() -> dict[str, Path]:
    """Module name -> file, for every .py file of the folders (packages as their __init__)."""
    modules: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports run when the module is imported, and those under `if TYPE_CHECKING:` (or
    any other module-level `if` / `try`): not the ones inside functions, which are lazy."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                stack.append(child)


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (relative imports resolved; `from p import x`
    points at p.x when that is a module, at p otherwise)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = name if is_package(path) else name.rpartition(".")[0]
        for node in module_level_imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                # `import a.b.c` and a name from a module: the nearest project module.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so that a deep chain of imports cannot exhaust Python's recursion limit.
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_resolves_relative_and_type_only_imports() -> None:
    graph = import_graph()
    # A relative import two levels up, and a module-level `from ... import` of a package.
    assert "hpcdispatch.server.dispatchers.base" in graph[
        "hpcdispatch.server.dispatchers.cp.cp_dispatch"]
    # A package's __init__ importing its own modules.
    assert "hpcdispatch.client.client" in graph["hpcdispatch.client"]
    # The finder sees a cycle made of type-only imports.
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    assert [type(n).__name__ for n in module_level_imports(tree)] == ["ImportFrom", "ImportFrom"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_even_counting_type_checking_imports() -> None:
    found = cycles(import_graph())
    assert found == [], "modules that import each other (one arrow must go):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def test_every_package_says_what_it_answers() -> None:
    modules = project_modules()
    packages = {name: path for name, path in modules.items() if is_package(path)}
    assert "hpcdispatch.server.dispatchers.cp" in packages  # the walk finds the rooms
    silent = []
    for path in sorted(packages.values()):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        text = (docstring or "").strip()
        # At least one sentence: a few words ending with a full stop (not just ".").
        if len(text.split()) < 3 or not SENTENCE_END.search(text):
            silent.append(f"{path.relative_to(ROOT)}: {docstring!r}")
    assert silent == [], "say in the docstring what the room answers:\n" + "\n".join(silent)


def defined_and_exported(path: Path) -> tuple[set[str], list[str]]:
    """The names a module defines at its top level (classes, functions, assignments; not what
    it imports), and its `__all__`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    defined: set[str] = set()
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if "__all__" in names and node.value is not None:
                exported = list(ast.literal_eval(node.value))
            defined |= names - {"__all__"}
    return defined, exported


def test_the_pipeline_exports_only_its_own_names() -> None:
    """The one door into the core passes on none of the core's names: the rooms above take the
    shared domain model from `server/domain/`, and the rest of the core only through what the
    pipeline defines (docs/architecture.md)."""
    pipeline = project_modules()["hpcdispatch.server.pipeline"]
    defined, exported = defined_and_exported(pipeline)
    assert exported, "pipeline.py has an __all__"
    assert sorted(set(exported) - defined) == [], "re-exported by the pipeline"
    # And what anything imports from the pipeline is one of its exports.
    imported_elsewhere = []
    for path in [*ROOT.glob("server/**/*.py"), *ROOT.glob("tests/**/*.py"),
                 *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("sim_adapter/**/*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("pipeline"):
                imported_elsewhere += [f"{path.relative_to(ROOT)}: {alias.name}"
                                       for alias in node.names if alias.name not in exported]
    assert imported_elsewhere == [], "imported from the pipeline, not exported by it"

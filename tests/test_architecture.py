"""The package boundaries of shared/STYLE.md, checked on the import statements themselves."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("decoding", "cache", "chatbot", "webui", "data", "bench", "scripts")
# Pure logic: no torch, no transformers, no kernel build, and nothing of the project that brings them in.
PURE_MODULES = (
    "decoding.reference_index", "decoding.policy", "decoding.cost_curve", "decoding.steps", "decoding.recipe",
)
HEAVY = ("torch", "transformers", "decoding.lane_kernel")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str] = frozenset()) -> set[str]:
    """Modules that `path` imports, relative imports resolved; `from pkg import submodule` names the submodule.

    As import linters do, a submodule's implicit import of its package's __init__ is not counted.
    """
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules
            found |= submodules if len(submodules) == len(node.names) else {target, *submodules}
    return found


def project_graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")] + [ROOT / "app.py"]
    modules = {module_name(p): p for p in files if p.exists()}
    names = set(modules)
    return {
        name: {m for m in imported_modules(path, names) if m in names and m != name} for name, path in modules.items()
    }


def test_no_import_cycle_among_project_modules():
    graph = project_graph()
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize(
    "package, forbidden",
    [
        ("decoding", ("cache", "chatbot", "webui", "bench", "data", "app")),
        ("cache", ("decoding", "chatbot", "webui", "bench", "app", "torch", "transformers")),
        ("chatbot", ("webui", "bench", "app")),
        ("webui", ("cache", "decoding", "bench", "data", "app", "torch", "transformers")),
        ("scripts", ("chatbot", "webui", "bench", "app")),  # preparation steps: a model folder, an embedder
    ],
)
def test_packages_keep_to_their_layer(package, forbidden):
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / package).rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in forbidden
    ]
    assert offenders == []


def test_no_package_imports_the_scripts():
    offenders = [f"{name} imports {target}" for name, targets in project_graph().items()
                 for target in targets if target.startswith("scripts") and not name.startswith("scripts")]
    assert offenders == []


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_reach_no_torch_directly_or_through_the_project(module):
    graph, paths = project_graph(), {module_name(p): p for p in (ROOT / "decoding").rglob("*.py")}
    reached, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [m for m in graph[name] if m != "decoding"]  # a package's __init__ is not its modules'
    offenders = [
        f"{name} imports {imported}" for name in sorted(reached) for imported in imported_modules(paths[name])
        if imported.split(".")[0] in HEAVY or imported in HEAVY
    ]
    assert offenders == [] and reached <= set(PURE_MODULES), (offenders, reached - set(PURE_MODULES))


# A module a newcomer reads whole: past this, it is two ideas in one file (issue 44).
MAX_MODULE_LINES = 400


def test_no_module_of_the_packages_is_longer_than_a_newcomer_reads_whole():
    modules = [ROOT / "app.py", *(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))]
    lines = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in modules}
    too_long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not too_long, too_long

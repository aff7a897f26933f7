"""The package boundaries of shared/STYLE.md, checked on the import statements themselves."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("decoding", "cache", "chatbot", "webui", "data", "bench")


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

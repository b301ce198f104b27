"""The layers import one way: core (pure) <- tickets <- compaction, ledger <- desk, and evals and bench (tooling) on top.

Every import is read from the source, function-level ones included, so no cycle hides inside a function.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from django.conf import settings

REPO = Path(settings.BASE_DIR)
PACKAGES = ("core", "sundry", "tickets", "compaction", "ledger", "notify", "desk", "evals", "bench")
# What each package may import from the project (its own modules aside).
ALLOWED = {
    "core": set(),
    # The notification hooks (notify.events, which imports neither tickets nor compaction) are called where
    # the events happen; notify's periodic check reads tickets, its signature is the ledger's.
    "tickets": {"core", "notify"},
    "compaction": {"core", "tickets", "notify"},
    "notify": {"core", "tickets", "ledger"},
    "ledger": {"core", "tickets"},
    "desk": {"core", "tickets", "compaction", "ledger"},
    "evals": {"core", "tickets", "compaction", "ledger", "desk"},
    "bench": {"core", "tickets", "compaction", "ledger", "desk", "evals", "sundry"},
    "sundry": {"core", "tickets", "compaction", "ledger", "desk"},
}
# Pure code: the standard library and these libraries only (no Django, no database).
CORE_MAY_IMPORT = {"pydantic", "tiktoken", "tiktoken_ext"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports() -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in its body."""
    modules = {
        _module_name(path): path
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            targets.update(c for c in candidates if c in modules and c != name)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of modules, or None (iterative depth-first search)."""
    state: dict[str, int] = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, pending = stack[-1]
            if not pending:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = pending.pop()
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph[nxt])))
    return None


def test_no_import_cycle_between_modules_function_level_imports_included() -> None:
    assert find_cycle(project_imports()) is None


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in project_imports().items():
        package = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != package and other not in ALLOWED[package]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_core_imports_neither_django_nor_the_project() -> None:
    wrong = []
    for path in (REPO / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "core" or top in CORE_MAY_IMPORT:
                    continue
                wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert wrong == []

"""The house's layers hold: every module imports only its own layer or the ones below (type-only imports
included), and no two parts of the package import each other. See README "Development" for the layout."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_robustexplain"

# The old paths of modules that moved into a check's room (or below it): each only makes its old name the
# new module, so a user's import keeps working; nothing in the package imports them.
MOVED = ("guard", "copying", "grounding", "adversarial", "faithfulness", "polarity", "donors")

# Bottom to top. A part is a top-level module or subpackage of pytest_robustexplain.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "sanitize", "wording", "yaml_limits", "safe_files", "store", "results", "data",
               "backends"}),
    frozenset({"perturbations", "metrics", "score_cache", "stats"}),
    frozenset({"options"}),
    frozenset({"checks"}),
    frozenset({"settings"}),
    frozenset({"explainers"}),
    frozenset({"sweep", "report"}),
    frozenset({"engine", "registrations"}),
    frozenset({"cli", "runner", "plugin", "hookspecs", "api", "testing", "__main__", "__init__", *MOVED}),
)
LAYER = {part: level for level, parts in enumerate(LAYERS) for part in parts}

# Packages split along their section banners, their modules bottom to top: each imports only the modules
# listed before it, and the package face (``__init__``) only hands names on.
INNER: dict[str, tuple[str, ...]] = {
    "settings": ("parsers", "table", "record", "checks", "layers", "pytest_files", "marker"),
    "cli": ("common", "reference", "run", "merge", "report", "compare", "history", "dataset", "parser",
            "entry"),
    "report/summary": ("gates", "spend", "advice", "compute", "findings"),
    "report/html": ("common", "charts", "pairs", "page", "document"),
    "metrics": ("base", "weights", "user", "text", "mentions", "copies", "scoring", "api"),
    "sweep": ("records", "planner", "books", "scoring", "loop", "background"),
    "options": ("parsers", "spec"),
}
# checks/: the interface at the bottom, the registry on top, and one module per check between them that
# imports only the interface — so a new check is its module, its registration line and its test, with no
# line here to add. A check that measures more has a room (a folder: its measurement, then its check), and
# the cross-user control's room ``controls`` is also what its four checks share: a room imports only the
# interface and ``controls`` from the rest of checks/.
CHECK_INTERFACE = ("base", "combine", "predicate")
SHARED_ROOM = "controls"
ROOMS: dict[str, tuple[str, ...]] = {
    "controls": ("cases", "copying", "grounding", "sensitivity", "relative", "evaluate", "report", "check"),
    "attacks": ("measure", "check"),
    "polarity": ("measure", "check", "flip"),
    "judge": ("measure", "prompt", "check"),
}
INNER.update({f"checks/{room}": order for room, order in ROOMS.items()})


def _checks_order() -> tuple[str, ...]:
    modules = {p.stem for p in (PACKAGE / "checks").glob("*.py")} - {"__init__", "registry", *CHECK_INTERFACE}
    return (*CHECK_INTERFACE, *sorted(modules), "registry")


INNER["checks"] = _checks_order()


def test_every_room_of_checks_has_its_order() -> None:
    assert {p.parent.name for p in (PACKAGE / "checks").glob("*/__init__.py")} == set(ROOMS)


def test_a_check_imports_only_the_checks_interface() -> None:
    allowed = {*CHECK_INTERFACE, SHARED_ROOM}
    known = {*_checks_order(), *ROOMS}
    for module in _checks_order()[len(CHECK_INTERFACE):-1]:
        deps = _siblings(PACKAGE / "checks" / f"{module}.py") & known
        assert deps <= allowed, f"checks/{module} imports {sorted(deps - allowed)}"
    for room in ROOMS:
        for path in (PACKAGE / "checks" / room).glob("*.py"):
            deps = _siblings(path, level=2) & known
            assert deps <= allowed - {room}, f"checks/{room}/{path.stem} imports {sorted(deps - allowed)}"


def _part(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imported_parts(path: Path) -> set[str]:
    """The package parts a module imports, at any depth (lazy and TYPE_CHECKING imports too)."""
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for a top-level module
    parts: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            up = node.level - 1  # levels above the module's own package
            if up < depth:  # inside its own subpackage: not another part
                continue
            if node.module:
                parts.add(node.module.split(".")[0])
            else:
                parts.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_robustexplain."):
            parts.add(node.module.split(".")[1])  # type: ignore[union-attr]
    return parts


def _graph() -> dict[str, set[str]]:
    paths = list(PACKAGE.rglob("*.py"))
    known = {_part(path) for path in paths}  # ``from . import __version__`` names no part
    graph: dict[str, set[str]] = {}
    for path in paths:
        part = _part(path)
        graph.setdefault(part, set()).update(p for p in _imported_parts(path) if p != part and p in known)
    return graph


def test_every_part_has_a_layer() -> None:
    assert set(_graph()) <= set(LAYER), set(_graph()) - set(LAYER)


def test_no_part_imports_a_part_above_it() -> None:
    upward = sorted((a, b) for a, deps in _graph().items() for b in deps if LAYER[b] > LAYER[a])
    assert upward == []


def test_no_two_parts_import_each_other() -> None:
    graph = _graph()
    seen: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, " → ".join((*path, part))
        if part in seen:
            return
        for dep in sorted(graph.get(part, ())):
            visit(dep, (*path, part))
        seen.add(part)

    for part in sorted(graph):
        visit(part, ())


def _siblings(path: Path, level: int = 1) -> set[str]:
    """The modules of its own package (``level`` 2: of the package above) that a module imports (lazy and
    TYPE_CHECKING imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == level:
            found.update([node.module.split(".")[0]] if node.module else (a.name for a in node.names))
    return found


def test_split_packages_import_only_downward() -> None:
    upward = []
    for package, order in INNER.items():
        folder = PACKAGE / package
        assert sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") == sorted(order), package
        for module in order:
            deps = _siblings(folder / f"{module}.py")
            upward += [f"{package}/{module} imports {dep}" for dep in sorted(deps)
                       if dep in order and order.index(dep) >= order.index(module)]
    assert upward == []


def test_split_package_faces_only_hand_names_on() -> None:
    for package in INNER:
        tree = ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8"))
        body = tree.body[1:] if ast.get_docstring(tree) else tree.body
        kept = [node.lineno for node in body if not isinstance(node, (ast.Import, ast.ImportFrom))
                and not (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__")]
        assert kept == [], f"{package}/__init__.py defines more than it hands on (lines {kept})"


def test_no_module_imports_another_modules_private_name() -> None:
    # A helper two modules share is public inside the package; a ``_name`` is its module's own business.
    crossing = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                    "pytest_robustexplain")):
                source = "." * node.level + (node.module or "")
                crossing += [f"{path.relative_to(PACKAGE)}: {alias.name} from {source}"
                             for alias in node.names
                             if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert crossing == []


# The pytest door: the modules that import pytest to do their work. The run itself (planning, calling,
# deciding, the end of a session, the progress line) is the engine's and pytest-free, so the door stays a
# translation — issue 39's budget is 450 lines for all of it. ``hookspecs`` only declares the hooks, and
# ``settings`` registers the option table with pytest's parser from inside a function: neither imports
# pytest when it is imported.
PYTEST_DOOR = ("plugin.py", "runner.py")
PYTEST_DOOR_LINES = 450


def test_the_pytest_door_is_thin() -> None:
    lines = {name: len((PACKAGE / name).read_text(encoding="utf-8").splitlines()) for name in PYTEST_DOOR}
    assert sum(lines.values()) <= PYTEST_DOOR_LINES, lines


def test_only_the_door_imports_pytest_at_import_time() -> None:
    importing = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: a function may import pytest when pytest calls it
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(name.split(".")[0] in ("pytest", "_pytest") for name in names):
                importing.append(str(path.relative_to(PACKAGE)))
    assert sorted(importing) == sorted(PYTEST_DOOR)


# Why an import waits for its function (issue 60): the cost of loading it (numpy, scipy, httpx, a module the
# plugin's own import does not load), an import cycle, or a library some platforms lack.
LOCAL_IMPORT_REASONS = ("# lazy:", "# cycle:", "# optional")


def test_a_function_local_import_says_why() -> None:
    """An import inside a function is there for a reason said beside it (on its lines or the line above):
    anything else is imported at the top, where a reader looks for it."""
    unsaid = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    said = "\n".join(lines[node.lineno - 2:node.end_lineno])
                    if not any(reason in said for reason in LOCAL_IMPORT_REASONS):
                        unsaid.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not unsaid, f"function-local imports without their reason: {sorted(set(unsaid))}"


def test_an_old_path_is_the_moved_module() -> None:
    # ``from pytest_robustexplain.guard import evaluate`` (or patching it there) reaches the moved module.
    import importlib
    import sys

    for name in MOVED:
        module = importlib.import_module(f"pytest_robustexplain.{name}")
        assert module is sys.modules[f"pytest_robustexplain.{name}"]
        assert module.__name__ != f"pytest_robustexplain.{name}", f"{name} is not an old path"

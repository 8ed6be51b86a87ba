"""The house rules of the source tree (docs/architecture.md): the package's folders read as the
architecture, no import cycles, no module past about 400 lines nor function past about 50 (or
ruff's complexity limit), each module's docstring says what it is, and mypy checks the whole
package strictly."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"cfn_provider": REPO / "daemon", "cfn_provider.handlers": REPO / "handlers"}
MAX_LINES = 420  # "about 400"


def _modules() -> dict[str, Path]:
    found = {}
    for prefix, folder in ROOTS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [prefix, *path.relative_to(folder).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module of the package that `name` imports, at any depth of its code."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    out.add(f"{target}.{alias.name}")
                elif target in MODULES:
                    out.add(target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in MODULES)
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    # a package's __init__ may name its own submodules (open_store picks one); that is no cycle
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    assert _cycles(graph) == []


# The layers, from the ground up (docs/architecture.md "Layers"): a room (a folder under daemon/, or a
# module at its top) imports only rooms on its own floor or below, and no two rooms import each other.
# `cfn_provider` is the package's own __init__ (the handler SDK's public names); `handlers` the built-ins.
LAYERS: list[tuple[str, set[str]]] = [
    ("ground: errors, the event loop, what an action returns", {"errors", "loops", "editable", "progress"}),
    ("logs and metrics", {"logs", "metrics"}),
    ("trust", {"trust"}),
    ("dialects and function environments", {"dialects", "functions"}),
    ("transports: the queue interface and its clients", {"transports", "web_settings"}),
    (
        "settings, the transports' run options, shared option help",
        {"config", "ros_options", "web_options", "cli_options", "aws_start"},
    ),
    ("stores", {"stores"}),
    ("the pipeline: the worker and its steps", {"pipeline"}),
    ("intakes: what feeds the worker", {"intake"}),
    ("the handler SDK and the operator commands", {"sdk", "ops"}),
    ("service", {"service", "function_isolation"}),
    (
        "local tools and the CLI's parts",
        {"local", "run_options", "cli_handlers", "cli_errors", "cli_from_template", "cli_local"},
    ),
    ("the CLI, the public names and the built-in handlers", {"cli", "__main__", "cfn_provider", "handlers"}),
]
FLOOR = {room: i for i, (_, rooms) in enumerate(LAYERS, 1) for room in rooms}  # 1: the ground


def _room(name: str) -> str:
    parts = name.split(".")
    if parts[:2] == ["cfn_provider", "handlers"]:
        return "handlers"
    return parts[1] if len(parts) > 1 else "cfn_provider"


def _room_imports() -> dict[tuple[str, str], tuple[str, str]]:
    """(room, room it imports) -> one (module, imported module) that does it."""
    found = {}
    for name, path in MODULES.items():
        for target in sorted(_imports(name, path)):
            a, b = _room(name), _room(target)
            if a != b:
                found.setdefault((a, b), (name, target))
    return found


def test_every_room_has_a_floor():
    rooms = {_room(name) for name in MODULES}
    assert rooms - FLOOR.keys() == set(), "place the new room in LAYERS (and docs/architecture.md)"
    assert FLOOR.keys() - rooms == set(), "LAYERS names a room that is gone"


def test_imports_run_downwards_only():
    upward = [
        f"{module} ({a}, floor {FLOOR[a]}) imports {target} ({b}, floor {FLOOR[b]})"
        for (a, b), (module, target) in _room_imports().items()
        if FLOOR[b] > FLOOR[a]
    ]
    assert upward == []


def test_no_two_rooms_import_each_other():
    edges = _room_imports()
    pairs = [
        f"{edges[a, b][0]} imports {edges[a, b][1]}, and {edges[b, a][0]} imports {edges[b, a][1]}"
        for a, b in sorted(edges)
        if a < b and (b, a) in edges
    ]
    assert pairs == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short_and_says_what_it_is(name: str):
    path = MODULES[name]
    text = path.read_text()
    docstring = ast.get_docstring(ast.parse(text)) or ""
    lines = len(text.splitlines())
    assert name.endswith("__main__") or docstring.strip(), f"{path}: no docstring saying what it is"
    assert lines <= MAX_LINES, f"{path} has {lines} lines, over {MAX_LINES}: split it along its seams"


def test_the_folders_read_as_the_architecture():
    packages = sorted(p.name for p in (REPO / "daemon").iterdir() if (p / "__init__.py").is_file())
    assert packages == [
        "dialects",
        "functions",
        "intake",
        "local",
        "ops",
        "pipeline",
        "sdk",
        "stores",
        "transports",
        "trust",
    ]


def test_mypy_is_strict_over_the_whole_package():
    """`make test` runs `mypy -p cfn_provider` under setup.cfg: `strict` for every module, handlers
    included; a per-module section only lets off third-party libraries that ship no annotations."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    assert config.getboolean("mypy", "strict")
    for section in (s for s in config.sections() if s.startswith("mypy-")):
        modules = [m.strip() for m in section.removeprefix("mypy-").split(",")]
        assert not any(m.split(".")[0] == "cfn_provider" for m in modules), f"[{section}] relaxes the package"
        assert dict(config[section]) == {"ignore_missing_imports": "True"}, f"[{section}]"


MAX_FUNCTION_LINES = 50  # "about 50": a function's body, without its docstring (a click command's help)


def _long_functions() -> dict[str, int]:
    found = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            if body:
                lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{name}.{node.name}"] = lines
    return found


def test_no_function_past_about_50_lines():
    assert _long_functions() == {}, "split them along their seams"


def test_ruff_checks_complexity_with_no_exceptions():
    """ruff's C901 (max-complexity 12) runs over the package, and no function is excused from it."""
    config = (REPO / "ruff.toml").read_text()
    assert '"C90"' in config or '"C901"' in config
    assert "max-complexity = 12" in config
    excused = [
        f"{path}:{i}"
        for path in MODULES.values()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "noqa: C901" in line
    ]
    assert excused == []

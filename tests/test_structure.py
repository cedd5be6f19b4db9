"""The structure rules of docs/design.md ("Rules"), checked on the source (issue 33).

Every import statement of kcache/, dispatcher/ and cli/ is read with ``ast`` (inside functions
and under ``TYPE_CHECKING`` too). An import names the module it imports: ``from a.b import c``
is an import of ``a.b.c`` when that is a module of the tree, else of ``a.b``; importing
``a.b.c`` is not counted as importing ``a.b`` (as import-linter and grimp count). Then:

* imports run one way through the layers of :data:`LAYERS` (a module imports only its own
  layer or lower ones) and form no circle;
* the old import paths (:data:`OLD_PATHS`, plain re-export modules) are imported by nothing;
* no module ``__getattr__`` outside package ``__init__`` files;
* at most 600 lines per module.
"""
from __future__ import annotations

import ast
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
#: folder -> the import name it is installed as (pyproject.toml's package-dir)
ROOTS = {"kcache": "kcache", "dispatcher": "kcache.dispatcher", "cli": "kcache.cli"}
MAX_LINES = 600

#: Layers, lowest first: module-name prefixes (a module takes the layer of its longest
#: matching prefix). docs/design.md has the same table.
LAYERS = [
    ("errors", ["kcache.errors"]),
    ("base", ["kcache.text", "kcache.warn", "kcache.arch", "kcache.config.values"]),
    ("keys", ["kcache.keys"]),
    ("disk", ["kcache.disk"]),
    ("entry", ["kcache.entry", "kcache.toolchain"]),
    ("tiers", ["kcache.tiers"]),
    ("settings", ["kcache.config"]),
    ("store", ["kcache.store"]),
    ("producers", ["kcache.dispatcher", "kcache.programs"]),
    ("cli", ["kcache.cli", "kcache._hook", "kcache.__main__"]),
]
#: Old import paths of public names, kept as plain re-export modules: nothing imports them.
OLD_PATHS = {"kcache.artifacts", "kcache.bundle", "kcache.fsio", "kcache.locks", "kcache.paths",
             "kcache.prune", "kcache.remote", "kcache.stats"}
#: kcache/__init__.py loads its public names on first use (importlib): it imports no module
#: of the tree statically, so naming it (``from kcache import Store``) is allowed anywhere.
LAZY_ROOT = "kcache"


def _modules() -> dict[str, Path]:
    found = {}
    for folder, name in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str) -> list[tuple[str, int]]:
    """(imported module of the tree, line) for every import statement of ``module``."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    package = module if _is_package(module) else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name)
                if target:
                    found.append((target, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                target = _known(f"{source}.{alias.name}") or _known(source)
                if target:
                    found.append((target, node.lineno))
    return found


def _known(name: str) -> str | None:
    """``name`` itself, or the longest prefix of it, that is a module of the tree."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _layer(module: str) -> int:
    best, level = -1, None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    return level


GRAPH = {m: sorted({t for t, _ in _imports(m) if t != m}) for m in MODULES}


def _dispatcher(module: str) -> bool:
    return module == "kcache.dispatcher" or module.startswith("kcache.dispatcher.")


def _circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        part.append(top)
                        if top == node:
                            break
                    if len(part) > 1:
                        result.append(sorted(part))
    return result


def test_every_module_has_a_layer():
    placed = {LAZY_ROOT} | OLD_PATHS
    assert [m for m in MODULES if m not in placed and _layer(m) is None] == []


def test_imports_run_one_way_through_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        if module in OLD_PATHS or module == LAZY_ROOT:
            continue
        for target in targets:
            if target == LAZY_ROOT or target in OLD_PATHS:
                continue
            if _layer(target) > _layer(module):
                wrong.append(f"{module} ({LAYERS[_layer(module)][0]}) imports {target} "
                             f"({LAYERS[_layer(target)][0]})")
    assert wrong == []


def test_the_old_import_paths_are_imported_by_nothing():
    users = [f"{m} imports {t}" for m, ts in GRAPH.items() for t in ts if t in OLD_PATHS]
    assert users == []


def test_no_import_circles_outside_the_dispatcher():
    circles = _circles({m: [t for t in ts if not _dispatcher(t)] for m, ts in GRAPH.items()
                        if not _dispatcher(m)})
    assert circles == []


def test_no_import_circles_in_the_dispatcher():
    assert [c for c in _circles(GRAPH) if any(_dispatcher(m) for m in c)] == []


def _module_getattr(module: str) -> bool:
    tree = ast.parse(MODULES[module].read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


def test_no_module_getattr_outside_package_inits():
    assert [m for m in MODULES if not _dispatcher(m) and not _is_package(m) and _module_getattr(m)] == []


def test_no_module_getattr_outside_package_inits_in_the_dispatcher():
    assert [m for m in MODULES if _dispatcher(m) and not _is_package(m) and _module_getattr(m)] == []


def _long(modules) -> list[str]:
    return [f"{MODULES[m].relative_to(REPO)}: {n} lines" for m in modules
            if (n := len(MODULES[m].read_text().splitlines())) > MAX_LINES]


def test_modules_are_at_most_600_lines():
    assert _long(m for m in MODULES if not _dispatcher(m)) == []


def test_dispatcher_modules_are_at_most_600_lines():
    assert _long(m for m in MODULES if _dispatcher(m)) == []


def test_the_checks_see_the_imports_they_count():
    """The reader finds imports inside functions and relative ones (a check that read
    nothing would pass every rule)."""
    assert "kcache.store.maintenance" in GRAPH["kcache.store.facade"]  # inside a function
    assert "kcache.errors" in GRAPH["kcache.disk.fsio"]  # relative, two dots
    assert _circles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


# --- the dispatcher's process state: one object (dispatcher/process.py) -----------------------

#: Methods that change a container in place.
_MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
             "clear", "remove", "discard", "appendleft", "sort", "reverse"}
#: Module-level objects that exist only to hold or guard state.
_STATE_MAKERS = {"Lock", "RLock", "local", "Event", "Condition", "WeakKeyDictionary",
                 "WeakValueDictionary", "WeakSet", "Counter", "defaultdict", "deque"}
#: Where the process state lives.
_STATE_HOLDER = "kcache.dispatcher.process"


def _generic_dispatcher(module: str) -> bool:
    return _dispatcher(module) and not module.startswith("kcache.dispatcher.frontends")


def _state_in(source: str) -> list[str]:
    """Module globals and class attributes a module (its ``source``) keeps state in: a
    module-level object that holds or guards state, a ``global`` statement, a module-level
    name or a class's attribute written (item, attribute or in-place method) by a function."""
    tree = ast.parse(source)
    names = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
             if isinstance(t, ast.Name)}
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    found = []
    for node in tree.body:
        value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AnnAssign)) \
            else None
        if isinstance(value, ast.Call):
            func = value.func
            made = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if made in _STATE_MAKERS:
                found.append(f"line {node.lineno}: a module-level {made}()")

    def owners(target) -> list:
        if isinstance(target, (ast.Tuple, ast.List)):
            return [o for t in target.elts for o in owners(t)]
        base = target.value if isinstance(target, (ast.Subscript, ast.Attribute)) else None
        return [base.id] if isinstance(base, ast.Name) and base.id in names | classes | {"cls"} \
            else []

    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found.append(f"line {node.lineno}: global {', '.join(node.names)}")
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if owners(target):
                    found.append(f"line {node.lineno}: {ast.unparse(target)} written")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _MUTATORS and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in names:
                found.append(f"line {node.lineno}: {ast.unparse(node.func)}() called")
    return found


def test_the_dispatchers_process_state_is_one_object():
    """issue 33: what the generic dispatcher modules keep for the process lives in
    ``process.STATE``, not in module globals or class attributes."""
    found = {m: s for m in MODULES if _generic_dispatcher(m) and m != _STATE_HOLDER
             if (s := _state_in(MODULES[m].read_text()))}
    assert found == {}


def test_the_state_check_sees_state():
    """The check finds each kind of state it looks for (one that found nothing would pass)."""
    source = (
        "import threading, weakref\n_lock = threading.Lock()\n_memo = {}\n_flag = [None]\n"
        "_seen = weakref.WeakKeyDictionary()\n_last = None\n"
        "class Options:\n    store = None\n"
        "    @classmethod\n    def open(cls):\n        cls.store = 1\n"
        "STATE = Options()\n"
        "def f(x):\n    global _last\n    _memo[x] = 1\n    _flag[0] = x\n"
        "    _memo.setdefault(x, 2)\n    Options.store = x\n    local = {}\n    local[x] = 1\n"
        "    _flag[0], y = x, 1\n    STATE.store = x\n    x.store = 1\n")
    assert sorted(f.split(": ", 1)[1] for f in _state_in(source)) == [
        "(_flag[0], y) written", "Options.store written", "STATE.store written",
        "_flag[0] written", "_memo.setdefault() called",
        "_memo[x] written", "a module-level Lock()", "a module-level WeakKeyDictionary()",
        "cls.store written", "global _last"]

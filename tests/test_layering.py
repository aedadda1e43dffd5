"""The package's import structure (docs/usage.md "Layout"): every module of ``subgpu_jax`` and
``hw_runtime`` is parsed with ``ast`` (module-level AND function-local imports), and

(a) the module import graph (a networkx ``DiGraph``) is acyclic;
(b) ``subgpu_jax`` layers are read in the order model < space < sim < score < search < app: a
    module never imports a module of a later layer;
(c) ``subgpu_jax`` never imports ``hw_runtime`` (the runtime plugs into the CLI through the
    ``subgpu.commands`` entry point);
(d) no module is longer than 800 lines (one warning names those over 600);
(e) no module uses a private name (``_x``) of another module of the two packages: neither
    ``from pkg.mod import _x`` nor ``mod._x`` through an imported module (capabilities are asked
    for by public name: ``score.protocol``);
(f) the command modules (``subgpu_jax/app/commands/``) import only the app and lower layers, never
    ``app.cli``, and only ``app.cli`` imports them.

Oracle: the rules themselves, applied to the source text (no import is executed).
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("subgpu_jax", "hw_runtime")
LAYERS = ("model", "space", "sim", "score", "search", "app")
MAX_LINES = 800
#: Modules longer than this are named in a warning, not a failure: the next ones to split by
#: concern, before they reach ``MAX_LINES``.
SOFT_MAX_LINES = 600


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the two packages."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str, known=None) -> str | None:
    """The longest known module that ``name`` (a module or module.attribute) refers to."""
    known = MODULES if known is None else known
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(mod: str, path: Path, known=None) -> set[str]:
    """Modules of the two packages that ``mod`` imports anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    here = mod if is_pkg else mod.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            r = _resolve(n, known)
            if r is not None and r != mod:
                found.add(r)
    return found


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    for mod, path in MODULES.items():
        for dep in _imports(mod, path):
            g.add_edge(mod, dep)
    return g


def _layer(mod: str) -> int | None:
    parts = mod.split(".")
    if parts[0] == "subgpu_jax" and len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def test_every_layer_folder_exists():
    for layer in LAYERS:
        assert (ROOT / "subgpu_jax" / layer / "__init__.py").is_file(), layer


def test_import_graph_is_acyclic():
    g = _graph()
    cycles = list(nx.simple_cycles(g))
    assert nx.is_directed_acyclic_graph(g), f"import cycles: {cycles[:5]}"


def test_no_import_of_a_later_layer():
    bad = [(a, b) for a, b in _graph().edges
           if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)]
    assert not bad, f"imports running back up the layers: {bad}"


def test_subgpu_jax_never_imports_hw_runtime():
    bad = [(a, b) for a, b in _graph().edges
           if a.startswith("subgpu_jax") and b.startswith("hw_runtime")]
    assert not bad, bad


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_module_length(mod):
    n = len(MODULES[mod].read_text().splitlines())
    assert n <= MAX_LINES, f"{mod}: {n} lines > {MAX_LINES}"


def test_modules_over_the_soft_length_are_listed():
    """Modules longer than ``SOFT_MAX_LINES`` (600) are listed, longest first, in one warning
    (pytest's warnings summary shows it); the test never fails on them. Oracle: the line counts
    of the files themselves."""
    counts = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    long = sorted(((n, m) for m, n in counts.items() if n > SOFT_MAX_LINES), reverse=True)
    if long:
        warnings.warn(f"{len(long)} modules over {SOFT_MAX_LINES} lines (split by concern "
                      f"before {MAX_LINES}): " + ", ".join(f"{m} {n}" for n, m in long),
                      stacklevel=1)


def test_the_oracle_sees_function_local_and_relative_imports(tmp_path):
    """Self-check on a hand-made package: ``pkg/a.py`` imports ``pkg.b`` only inside a function
    and ``pkg/b.py`` imports ``a`` relatively at module level, so the two edges a -> b and b -> a
    (a cycle) must both be found."""
    (tmp_path / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (tmp_path / "b.py").write_text("from .a import f\n")
    known = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    assert _imports("pkg.a", known["pkg.a"], known) == {"pkg.b"}
    assert _imports("pkg.b", known["pkg.b"], known) == {"pkg.a"}


#: The runtime core: the GPU side that the workflows drive. It never imports the app or the
#: workflows (issue 38: an honest boundary).
RUNTIME_CORE = ("hw_runtime.gpu", "hw_runtime.plan", "hw_runtime.timeline")


def _in(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_runtime_core_imports_neither_the_app_nor_the_workflows():
    """``hw_runtime/gpu/``, ``plan.py`` and ``timeline.py`` import nothing of ``subgpu_jax.app``,
    ``hw_runtime.commands`` or ``hw_runtime.tune``; the workflows (``commands``, ``tune``)
    import the app's modules directly. Oracle: the import graph of every module's source
    (function-local imports included, ``_imports``)."""
    bad = [(a, b) for a, b in _graph().edges if _in(a, RUNTIME_CORE)
           and _in(b, ("subgpu_jax.app", "hw_runtime.commands", "hw_runtime.tune"))]
    assert not bad, bad
    used = [(a, b) for a, b in _graph().edges if _in(a, ("hw_runtime.commands",
                                                          "hw_runtime.tune"))
            and b.startswith("subgpu_jax.app")]
    assert used, "the oracle must see the workflows' imports of the app"


#: The bodies of the ``subgpu`` sub-commands (``app/commands/``, issue 38).
APP_COMMANDS = "subgpu_jax.app.commands"


def test_app_commands_import_only_the_app_and_lower_layers():
    """The command modules (``subgpu_jax/app/commands/``) import modules of the app and the
    lower layers only, never ``app.cli`` (under ``python -m subgpu_jax.app.cli`` it is
    ``__main__``: importing it again would load it twice); only ``app.cli`` and the command
    modules themselves import them. Oracle: the import graph of every module's source
    (function-local imports included, ``_imports``)."""
    cmds = {m for m in MODULES if _in(m, (APP_COMMANDS,))}
    assert {f"{APP_COMMANDS}.{c}" for c in ("simulate", "search", "space")} <= cmds
    edges = list(_graph().edges)
    out = [(a, b) for a, b in edges if a in cmds and b not in cmds]
    assert out, "the oracle must see the command modules' imports"
    bad = [(a, b) for a, b in out if _layer(b) is None or b == "subgpu_jax.app.cli"]
    assert not bad, f"command modules importing outside the app and its layers: {bad}"
    users = {a for a, b in edges if b in cmds and a not in cmds}
    assert users == {"subgpu_jax.app.cli"}, users


def test_no_import_routed_round_the_graph():
    """No module loads another through ``importlib.import_module`` or ``__import__`` by a name
    the import graph cannot see, and ``app.options`` has no module ``__getattr__`` (the host API
    that re-exported app names is gone). Exempt: a package's ``__init__`` that loads its own
submodules on first use (``subgpu_jax``, ``subgpu_jax.search``: a user's top-level import stays
light; every name it loads lives inside that package)."""
    import subgpu_jax.app.options as options

    assert not hasattr(options, "HOST_API") and "__getattr__" not in vars(options)
    bad = [m for m, path in MODULES.items() if path.name != "__init__.py"
           and ("import_module(" in path.read_text() or "__import__(" in path.read_text())]
    assert not bad, bad


def _names_imported_from(module: str, pkg: str) -> list[tuple[str, str]]:
    """``(importing module, name)`` for every ``from module import name`` in ``pkg``'s files."""
    out = []
    for mod, path in MODULES.items():
        if not mod.startswith(pkg):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == module:
                out += [(mod, a.name) for a in node.names]
    return out


def test_runtime_imports_of_the_option_helpers_are_public():
    """Every name ``hw_runtime`` imports from ``subgpu_jax.app.options`` or ``subgpu_jax.app.args``
    is in that module's ``__all__``; the runtime's command modules live in
    ``hw_runtime/commands/`` (no ``hw_runtime/cli.py``). Oracle: the lists, and the source text
    of every runtime module."""
    from subgpu_jax.app import args, options

    for mod in (options, args):
        used = _names_imported_from(mod.__name__, "hw_runtime")
        assert used, f"the oracle found no runtime import of {mod.__name__}"
        bad = [(m, n) for m, n in used if n.split(" as ")[0] not in mod.__all__]
        assert not bad, f"names outside {mod.__name__}.__all__: {bad}"
    assert "hw_runtime.cli" not in MODULES and "hw_runtime.commands" in MODULES


def _private_uses(mod: str, path: Path, known=None) -> list[str]:
    """The private names of OTHER modules of ``known`` that ``mod`` uses: ``from m import _x``
    (module-level or local) and ``alias._x`` where ``alias`` names an imported module of
    ``known``; dunders are not private."""
    known = MODULES if known is None else known
    tree = ast.parse(path.read_text(), filename=str(path))
    here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]

    def private(n: str) -> bool:
        return n.startswith("_") and not n.startswith("__")

    aliases, out = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                b = here
                for _ in range(node.level - 1):
                    b = b.rpartition(".")[0]
                base = f"{b}.{node.module}" if node.module else b
            if base not in known or base == mod:
                continue
            for a in node.names:
                if f"{base}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
                elif private(a.name):
                    out.append(f"from {base} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and aliases.get(node.value.id, mod) != mod and private(node.attr)):
            out.append(f"{aliases[node.value.id]}.{node.attr}")
    return out


def test_no_private_name_of_another_module_is_used():
    """Zero cross-module uses of private names in ``subgpu_jax`` and ``hw_runtime`` (the issue
    counted ten private imports across the search and score modules)."""
    found = {m: u for m, p in MODULES.items() if (u := _private_uses(m, p))}
    assert not found, f"{sum(map(len, found.values()))} private uses across modules: {found}"


def test_the_private_use_oracle_sees_both_spellings(tmp_path):
    """Self-check on a hand-made package: ``pkg/a.py`` imports ``_f`` from ``pkg.b`` inside a
    function and reads ``b._g`` through a module alias; its own ``_h`` and ``b.__name__`` are not
    counted."""
    (tmp_path / "a.py").write_text("from pkg import b as mb\n_h = 1\n\ndef f():\n"
                                   "    from pkg.b import _f, ok\n    return mb._g, mb.__name__, "
                                   "_h\n")
    (tmp_path / "b.py").write_text("def _f():\n    pass\n_g = ok = 1\n")
    known = {"pkg": tmp_path / "__init__.py", "pkg.a": tmp_path / "a.py",
             "pkg.b": tmp_path / "b.py"}
    assert sorted(_private_uses("pkg.a", known["pkg.a"], known)) == ["from pkg.b import _f",
                                                                      "pkg.b._g"]
    assert _private_uses("pkg.b", known["pkg.b"], known) == []


def test_every_lazy_package_name_resolves():
    """``subgpu_jax``'s lazily imported names (its ``__all__``) each resolve: a function moved
    to another module (``run_search`` to ``app.searchrun``) left the map pointing at the old
    one, and ``subgpu_jax.run_search`` raised AttributeError."""
    import subgpu_jax

    for name in subgpu_jax.__all__:
        assert getattr(subgpu_jax, name) is not None, name

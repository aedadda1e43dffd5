"""Library docstrings and comments cite docs/ pages, not result files: no docstring or comment in
subgpu_jax/ or hw_runtime/ names a path under experiments/results/ (the docs page that describes a
measurement names its digest), and every docs/ page they cite exists."""
import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("subgpu_jax", "hw_runtime")


def _texts(path: Path):
    """(line, text) of every docstring and comment of a Python file."""
    src = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield (node.body[0].lineno, doc)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield (tok.start[0], tok.string)


def _library_files():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_no_library_docstring_names_a_results_file():
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in _library_files()
           for line, text in _texts(p) if "experiments/results/" in text]
    assert not bad, "cite the docs/ page that describes the measurement instead: " + ", ".join(bad)


def test_cited_docs_pages_exist():
    missing = {f"{p.relative_to(ROOT)}: {page}" for p in _library_files()
               for _, text in _texts(p) for page in re.findall(r"docs/([\w-]+\.md)", text)
               if not (ROOT / "docs" / page).is_file()}
    assert not missing, sorted(missing)

"""Every function under worker/ and its length in lines; the long ones must say why.

`python -m ops.function_lengths` prints a Markdown table (file, function, lines), longest first;
`--long` only the functions over LIMIT. A function over LIMIT lines (decorators and docstring
included) must say at the top of its docstring why it is one piece: a sentence starting
"Long on purpose" (tests/unit/test_function_lengths.py fails otherwise).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

LIMIT = 60
REASON = "Long on purpose"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Function:
    file: str  # relative to the repository
    name: str  # Class.method, outer.inner for nested functions
    lines: int
    docstring: str

    @property
    def explained(self) -> bool:
        return REASON in self.docstring


def functions(package: str = "worker", root: Path = ROOT) -> list[Function]:
    """Every function and method under `package`, in file order."""
    found: list[Function] = []
    for path in sorted((root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        found += _walk(tree, path.relative_to(root).as_posix(), "")
    return found


def _walk(node: ast.AST, file: str, prefix: str) -> list[Function]:
    found: list[Function] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([d.lineno for d in child.decorator_list] + [child.lineno])
            end = child.end_lineno or child.lineno
            doc = ast.get_docstring(child) or ""
            found.append(Function(file, prefix + child.name, end - start + 1, doc))
            found += _walk(child, file, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            found += _walk(child, file, f"{prefix}{child.name}.")
    return found


def unexplained(found: list[Function], limit: int = LIMIT) -> list[Function]:
    """The functions over `limit` lines whose docstring does not say why."""
    return [f for f in found if f.lines > limit and not f.explained]


def table(found: list[Function]) -> str:
    """A Markdown table, longest first (then by file and name)."""
    rows = sorted(found, key=lambda f: (-f.lines, f.file, f.name))
    lines = ["| file | function | lines |", "| --- | --- | ---: |"]
    lines += [f"| `{f.file}` | `{f.name}` | {f.lines} |" for f in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    found = functions()
    if "--long" in args:
        found = [f for f in found if f.lines > LIMIT]
    print(table(found))
    missing = unexplained(found)
    for f in missing:
        print(f"{f.file}:{f.name}: {f.lines} lines, no {REASON!r} in its docstring", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())

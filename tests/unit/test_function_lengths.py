"""No function in worker/ longer than ~60 lines without a reason stated at its top (issue 23)."""

from __future__ import annotations

from pathlib import Path

from ops.function_lengths import LIMIT, REASON, Function, functions, unexplained


def test_every_long_function_in_worker_says_why() -> None:
    """A function over LIMIT lines needs "Long on purpose ..." in its docstring: split it or say why."""
    missing = unexplained(functions())
    assert not missing, "\n".join(
        f"{f.file}:{f.name} is {f.lines} lines: split it, or say why in its docstring ({REASON} ...)"
        for f in missing
    )


def test_the_check_can_fail(tmp_path: Path) -> None:
    """A long function without the reason is found; with it, it is not; a short one never is."""
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    method_body = body.replace("\n", "\n    ")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        f'def long():\n    """Does much."""\n{body}\n\n\n'
        f'class C:\n    def fine(self):\n        """{REASON}: one transaction."""\n    {method_body}\n\n\n'
        "def short():\n    return 1\n"
    )
    found = functions("pkg", tmp_path)
    assert {f.name: f.lines for f in found} == {"long": LIMIT + 2, "C.fine": LIMIT + 2, "short": 2}
    assert [f.name for f in unexplained(found)] == ["long"]


def test_lengths_count_decorators_and_nested_functions(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("@staticmethod\ndef outer():\n    def inner():\n        pass\n")
    assert functions("pkg", tmp_path) == [
        Function("pkg/m.py", "outer", 4, ""),
        Function("pkg/m.py", "outer.inner", 2, ""),
    ]

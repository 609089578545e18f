"""The README's example agent, extracted from README.md and run as is in its own process against a
real compactd and FakeMessagesAPI (through the environment variables the example reads)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fakes.messages_api import FakeMessagesAPI, reply, tool_call
from tests.integration.conftest import Service

pytestmark = [pytest.mark.services]

MARKER = "<!-- example-agent -->"


def example_agent() -> str:
    """The python block right after the marker comment in README.md."""
    text = (REPO / "README.md").read_text()
    found = re.search(re.escape(MARKER) + r"\s*```python\n(.*?)```", text, re.S)
    assert found, f"README.md has no ```python block after {MARKER}"
    return found.group(1)


def run_readme_example(service: Service, tmp_path: Path, python: str | Path, env: dict[str, str]) -> None:
    """Run the README's example agent with `python` (and env) against service and a scripted
    FakeMessagesAPI; assert it answered, was given compactd's prompt, and its bash tool really ran."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    for name in ("a.py", "b.py", "notes.txt"):
        (work / name).write_text("x\n")
    script = tmp_path / "example_agent.py"
    script.write_text(example_agent())
    with FakeMessagesAPI() as fake:
        fake.script(
            tool_call("bash", {"command": "ls *.py | wc -l"}, tool_id="toolu_ex1", text="Let me look."),
            tool_call("bash", {"command": "echo oops >&2; exit 3"}, tool_id="toolu_ex2"),
            reply("There are 2 Python files."),
        )
        env = {k: v for k, v in env.items() if not k.startswith(("COMPACTD_", "ANTHROPIC_"))}
        env |= {
            "COMPACTD_URL": service.url,
            "COMPACTD_KEY": service.key,
            "ANTHROPIC_API_KEY": "test",
            "ANTHROPIC_BASE_URL": fake.base_url,
        }
        done = subprocess.run(
            [str(python), str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )
        bodies = fake.bodies
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "There are 2 Python files."
    assert len(bodies) == 3
    # the model was given compactd's prompt, and the bash tool really ran in the example's directory
    assert "cache_control" in bodies[0]["messages"][-1]["content"][-1]  # compactd's breakpoint
    (result,) = [b for b in bodies[1]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_ex1" and result["content"].strip() == "2"
    assert [t["name"] for t in bodies[1]["tools"]] == ["bash", "read_file", "grep", "update_working_memory"]
    # a failing command reaches the model as an error result carrying its exit status
    (failed,) = [b for b in bodies[2]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert failed["tool_use_id"] == "toolu_ex2" and failed.get("is_error") is True
    assert "oops" in str(failed["content"]) and "[exit status 3]" in str(failed["content"])


def test_the_readme_example_agent_runs_end_to_end(service: Service, tmp_path: Path) -> None:
    """The README's example agent runs as is from the repository's environment."""
    run_readme_example(service, tmp_path, sys.executable, {**os.environ, "PYTHONPATH": str(REPO)})

"""Agent modules: chosen with a documented precedence, imported at start-up, failing fast.

A mistyped module must stop a Lambda at init (the handler module's import) and local mode
before it says ``ready``, with a message naming the module and the import error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from durable_agents.agent import AgentModuleError, AgentRegistry
from durable_agents.aws.settings import import_agent_modules
from durable_agents_local.agents_loading import choose_agent_modules, load_agents

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("layers/runtime", "functions", "."))


@pytest.mark.parametrize("handler", ["step_runner.app", "api.app", "reconciler.app"])
def test_handler_import_fails_at_init_naming_the_module(handler: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": PYTHONPATH,
        "AGENT_MODULES": "agents.example,agents.no_such_agents",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", f"import {handler}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0, f"importing {handler} with a bad AGENT_MODULES succeeded"
    assert "AgentModuleError" in done.stderr
    assert "'agents.no_such_agents'" in done.stderr
    assert "No module named 'agents.no_such_agents'" in done.stderr


def test_import_agent_modules_reports_errors_raised_by_the_module(tmp_path: Path) -> None:
    (tmp_path / "broken_agents_mod.py").write_text("raise RuntimeError('boom at import')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(AgentModuleError) as caught:
            import_agent_modules({"AGENT_MODULES": "broken_agents_mod"}, AgentRegistry())
    finally:
        sys.path.remove(str(tmp_path))
    assert caught.value.module == "broken_agents_mod"
    assert "RuntimeError: boom at import" in str(caught.value)


def test_import_agent_modules_returns_what_registered(tmp_path: Path) -> None:
    (tmp_path / "byo_agents_one.py").write_text(
        "from durable_agents import agent\n"
        "@agent(name='byo-one', version='3')\n"
        "def one(ctx, x: int) -> int:\n    return x\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        loaded = import_agent_modules({"AGENT_MODULES": " byo_agents_one , "})
    finally:
        sys.path.remove(str(tmp_path))
    assert [(d.name, d.version) for d in loaded] == [("byo-one", "3")]


def test_local_agent_modules_precedence() -> None:
    template = {"AGENT_MODULES": "agents.example,agents.checkout"}
    chosen = choose_agent_modules([], {}, template)
    assert chosen.modules == ("agents.example", "agents.checkout")
    assert chosen.source == "template.yaml"
    chosen = choose_agent_modules([], {"AGENT_MODULES": "mine.agents"}, template)
    assert chosen.modules == ("mine.agents",)
    assert chosen.source == "the AGENT_MODULES environment variable"
    chosen = choose_agent_modules(
        ["flag.one,flag.two", "flag.three"], {"AGENT_MODULES": "mine.agents"}, template
    )
    assert chosen.modules == ("flag.one", "flag.two", "flag.three")
    assert chosen.source == "--agents"


def test_local_agents_load_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cwd_agents_mod.py").write_text(
        "from durable_agents import agent\n"
        "@agent(name='cwd-agent', version='7')\n"
        "def cwd_agent(ctx, x: int) -> int:\n    return x\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    chosen = choose_agent_modules(["cwd_agents_mod"], {}, {})
    loaded = load_agents(chosen)
    assert ("cwd-agent", "7") in [(d.name, d.version) for d in loaded]


def test_local_agents_error_names_the_source_and_module() -> None:
    chosen = choose_agent_modules(["agents.no_such_thing"], {}, {})
    with pytest.raises(AgentModuleError) as caught:
        load_agents(chosen)
    message = str(caught.value)
    assert "'agents.no_such_thing'" in message
    assert "--agents" in message
    assert "ModuleNotFoundError" in message


def test_local_mode_finds_a_template_from_any_directory(tmp_path: Path) -> None:
    from durable_agents_local.template import default_template

    assert default_template(tmp_path) == ROOT / "template.yaml"
    (tmp_path / "template.yaml").write_text("Resources: {}\n")
    assert default_template(tmp_path) == tmp_path / "template.yaml"

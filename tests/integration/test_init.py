"""`make dist` and `durable-agents init DIR`: an app of your own, without cloning this repo.

* The wheel installs into a fresh virtualenv (offline, ``--no-deps --no-index``; its
  dependencies come from this venv's site-packages through a ``.pth`` line, after the new
  venv's own), and from there ``durable-agents init`` writes an app whose tests pass.
* ``init`` refuses a non-empty DIR (exit 2); the app's template loads with the template suites'
  loader, names this repo's handlers and points at directories the app has; ``sam validate``
  and cfn-lint run on it when their venvs (.venv-sam, .venv-cfn) exist.
* The app runs in local mode: ``POST /runs`` of its example agent ends SUCCEEDED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from durable_agents_local import scaffold as init_scaffold
from durable_agents_local.moto_server import free_port
from tests.template.template_yaml import FUNCTIONS, load_cfn_yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "durable_agents_local.cli.main"]


def run(command: list[str], cwd: Path, timeout: float = 120, **kw: object) -> str:
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, **kw
    )
    report = f"{command}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, report
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def scaffold() -> None:
    """The generated part of the scaffold, as `make scaffold` writes it."""
    run([sys.executable, "scripts/scaffold.py"], cwd=ROOT)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, scaffold: None) -> Path:
    target = tmp_path_factory.mktemp("init") / "my-agents"
    out = run([*CLI, "init", str(target)], cwd=target.parent)
    assert "make local" in out
    return target


def test_dist_installs_offline_and_init_runs_from_the_wheel(tmp_path: Path, scaffold: None) -> None:
    pytest.importorskip("build", reason="python -m build is in the [dev] extra (make venv)")
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), "."],
        cwd=ROOT,
        timeout=180,
    )
    wheels = list((tmp_path / "dist").glob("durable_agents-*.whl"))
    assert len(wheels) == 1 and list((tmp_path / "dist").glob("durable_agents-*.tar.gz"))

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheels[0]),
        ],
        cwd=tmp_path,
    )
    site = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=tmp_path,
        ).strip()
    )
    # The dependencies (boto3, pydantic, moto, pytest...): this venv's, after the new venv's own.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    where = run(
        [
            str(python),
            "-c",
            "import durable_agents, durable_agents_local.scaffold as s; "
            "print(durable_agents.__file__); print(s.__file__)",
        ],
        cwd=tmp_path,
    )
    assert all(line.startswith(str(site)) for line in where.split()), where
    assert "init" in run([str(venv / "bin" / "durable-agents"), "--help"], cwd=tmp_path)

    target = tmp_path / "app"
    run([str(venv / "bin" / "durable-agents"), "init", str(target)], cwd=tmp_path)
    assert (target / "layers" / "runtime" / "durable_agents" / "agent.py").is_file()
    assert "2 passed" in run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=target
    )


def test_init_refuses_a_non_empty_directory(tmp_path: Path, scaffold: None) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    done = subprocess.run(
        [*CLI, "init", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "is not an empty directory" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_the_apps_tests_pass(app: Path) -> None:
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=app)
    assert "2 passed" in out


def test_the_apps_template_names_the_handlers_and_its_own_directories(app: Path) -> None:
    template = load_cfn_yaml((app / "template.yaml").read_text())
    resources = template["Resources"]
    for function, handler in FUNCTIONS.items():
        properties = resources[function]["Properties"]
        assert properties["Handler"] == handler
        package = handler.split(".")[0]
        assert (app / properties["CodeUri"] / package / "app.py").is_file()
    layer = resources["RuntimeLayer"]["Properties"]["ContentUri"]
    assert (app / layer / "Makefile").is_file()
    assert (app / layer / "durable_agents" / "__init__.py").is_file()
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["AGENT_MODULES"] == "agents.hello"
    assert "SCRIPTED_MODEL_FILE" not in variables
    assert (app / "functions" / "agents" / "hello.py").is_file()
    assert (app / ".gitignore").is_file() and (app / "samconfig.toml").is_file()


@pytest.mark.parametrize("tool", ["sam", "cfn-lint"])
def test_the_apps_template_validates(app: Path, tool: str) -> None:
    venv = ROOT / (".venv-sam" if tool == "sam" else ".venv-cfn")
    executable = venv / "bin" / tool
    if not executable.is_file():
        pytest.skip(f"no {executable.relative_to(ROOT)} (make venv-{venv.name[6:]} creates it)")
    command = (
        [str(executable), "validate", "--lint", "--region", "us-east-1"]
        if tool == "sam"
        else [str(executable), "template.yaml"]
    )
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    run(command, cwd=app, timeout=180, env=env)


def test_the_app_runs_its_agent_in_local_mode(app: Path, tmp_path: Path) -> None:
    api, moto = free_port(), free_port()
    local = subprocess.Popen(
        [*CLI, "local", "--ephemeral", "--port", str(api), "--moto-port", str(moto)],
        cwd=app,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "local.log").open("w"),
    )
    try:
        out = run(
            [
                *CLI,
                "runs",
                "start",
                "hello",
                '{"name": "Ada", "pause_seconds": 0}',
                "--api",
                f"http://127.0.0.1:{api}",
                "--wait",
                "60",
            ],
            cwd=app,
            timeout=120,
        )
        assert 'SUCCEEDED result: "Hello, Ada! (from your own app)"' in out
    finally:
        local.terminate()
        local.wait(timeout=30)
    assert "hello 1 (from template.yaml: agents.hello)" in (tmp_path / "local.log").read_text()


def test_the_scaffold_is_generated_from_this_repos_files(scaffold: None) -> None:
    generated = ROOT / "local" / "durable_agents_local" / "scaffold" / "generated"
    for handler in ("api", "step_runner", "reconciler", "relay"):
        assert (generated / "functions" / handler / "app.py").read_bytes() == (
            ROOT / "functions" / handler / "app.py"
        ).read_bytes()
    for name in (
        "functions/Makefile",
        "layers/runtime/Makefile",
        "layers/runtime/requirements.txt",
    ):
        assert (generated / name).read_bytes() == (ROOT / name).read_bytes()


def test_init_without_a_generated_scaffold_says_so_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(init_scaffold, "GENERATED", tmp_path / "missing")
    assert init_scaffold.main(tmp_path / "app") == 2
    assert "has no scaffold" in capsys.readouterr().err
    assert not (tmp_path / "app").exists()

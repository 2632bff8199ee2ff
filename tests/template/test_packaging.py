"""What `sam build` puts in the Lambda layer and in each function's package (docs/deploy.md).

The layer holds the runtime only: no local mode (durable_agents_local, with its fake payments,
email and tickets services), no test harness (durable_agents_local.testing), no developer CLI, and
none of the packages only they need (pyyaml, moto, werkzeug, flask: pyproject.toml's [local]
extra). Each function's package holds its handler's package, plus the agent packages when its
handler imports AGENT_MODULES at init.

These tests build the same file trees `sam build` does, offline and in about a second: they run
the Makefile targets the template names (layers/runtime/Makefile `layer-source`, which copies
the runtime; functions/Makefile `build-<Function>`), or, for a resource still built by SAM's
python3.13 builder, copy its whole code directory as that builder does. The third-party part of
the layer is the dependency closure of layers/runtime/requirements.txt, read from the installed
distributions' metadata. `make build-check` runs these tests on a real `sam build` instead
(PACKAGING_BUILD_DIR=.aws-sam/build), and then also checks the layer's installed distributions.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ("StepRunnerFunction", "ApiFunction", "ReconcilerFunction", "RelayFunction")
BUILD_DIR = os.environ.get("PACKAGING_BUILD_DIR")  # a `sam build` output to check instead
# What only a laptop needs is one package, durable_agents_local (local/): every module of it,
# listed from the source tree, must be missing from the layer, and so must any module of the
# same name under durable_agents (the layer's contents follow from the package boundary).
LOCAL_PACKAGE = ROOT / "local" / "durable_agents_local"
LOCAL_ONLY_MODULES = tuple(
    sorted(
        str(path.relative_to(LOCAL_PACKAGE.parent))
        for path in LOCAL_PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    )
)
# Lambda's python3.13 on arm64: the environment the layer's dependency markers are evaluated in.
LAMBDA_MARKERS = {
    "python_version": "3.13",
    "python_full_version": "3.13.0",
    "platform_machine": "aarch64",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


class _Loader(yaml.SafeLoader):
    """A SafeLoader that reads CloudFormation's short-form intrinsics (!Ref, !GetAtt...)."""


_Loader.add_constructor("!Ref", lambda loader, node: {"Ref": loader.construct_scalar(node)})
_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _template() -> dict[str, Any]:
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    return dict(_template()["Resources"])


@pytest.fixture(scope="module")
def globals_env() -> dict[str, Any]:
    return dict(_template()["Globals"]["Function"]["Environment"]["Variables"])


def _files(directory: Path) -> set[str]:
    return {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _build(resource: dict[str, Any], target: str, source: Path, artifacts: Path) -> Path:
    """Builds one resource's artifact directory the way `sam build` does, without SAM."""
    method = (resource.get("Metadata") or {}).get("BuildMethod")
    artifacts.mkdir(parents=True)
    if method == "makefile":
        # SAM runs `make -f <source>/Makefile build-<LogicalId>` in a copy of the source.
        scratch = artifacts.parent / f"{artifacts.name}-scratch"
        shutil.copytree(source, scratch, ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(
            ["make", "--no-print-directory", "-f", str(source / "Makefile"), target],
            cwd=scratch,
            # The Makefiles compile with PYTHON313; this interpreter stands in for it here (the
            # bytecode's tag follows), a real `sam build` uses python3.13 (make build-check).
            env={**os.environ, "ARTIFACTS_DIR": str(artifacts), "PYTHON313": sys.executable},
            check=True,
            capture_output=True,
        )
    else:
        # SAM's python builder copies the whole code directory (then pip-installs requirements).
        into = artifacts / "python" if resource["Type"].endswith("LayerVersion") else artifacts
        shutil.copytree(
            source, into, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True
        )
    return artifacts


@pytest.fixture(scope="module")
def layer(resources: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if BUILD_DIR:
        return Path(BUILD_DIR).resolve() / "RuntimeLayer" / "python"
    resource = resources["RuntimeLayer"]
    source = ROOT / resource["Properties"]["ContentUri"]
    out = tmp_path_factory.mktemp("build") / "RuntimeLayer"
    return _build(resource, "layer-source", source, out) / "python"


@pytest.fixture(scope="module")
def packages(
    resources: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    if BUILD_DIR:
        return {name: Path(BUILD_DIR).resolve() / name for name in FUNCTIONS}
    base = tmp_path_factory.mktemp("build")
    return {
        name: _build(
            resources[name],
            f"build-{name}",
            ROOT / resources[name]["Properties"]["CodeUri"],
            base / name,
        )
        for name in FUNCTIONS
    }


def _requirement_closure() -> dict[str, Requirement]:
    """Every distribution requirements.txt installs, transitively, on Lambda's python3.13."""
    lines = (ROOT / "layers" / "runtime" / "requirements.txt").read_text().splitlines()
    todo = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    seen: dict[str, Requirement] = {}
    while todo:
        req = todo.pop()
        name = _canonical(req.name)
        if req.marker is not None and not any(
            req.marker.evaluate({**LAMBDA_MARKERS, "extra": extra}) for extra in _extras(req)
        ):
            continue
        if name in seen and req.extras <= seen[name].extras:
            continue
        extras = req.extras | (seen[name].extras if name in seen else set())
        seen[name] = Requirement(f"{req.name}[{','.join(sorted(extras))}]" if extras else req.name)
        for dep in metadata.requires(req.name) or []:
            child = Requirement(dep)
            if child.marker is None or any(
                child.marker.evaluate({**LAMBDA_MARKERS, "extra": extra})
                for extra in ("", *sorted(extras))
            ):
                todo.append(Requirement(str(child).split(";")[0]))
    return seen


def _extras(req: Requirement) -> tuple[str, ...]:
    return ("", *sorted(req.extras))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level_names(distribution: str) -> set[str]:
    names = set()
    for file in metadata.files(distribution) or []:
        first = file.parts[0]
        if first.endswith((".dist-info", ".data")) or first in {"..", "bin"}:
            continue
        names.add(first.split(".")[0])
    return names


def _local_only_distributions() -> set[str]:
    """What only local mode needs: pyproject.toml's [local] extra, and at least these."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {_canonical(Requirement(r).name) for r in project["optional-dependencies"]["local"]}
    return (extra | {"pyyaml", "moto", "werkzeug", "flask", "flask-cors"}) - {"boto3"}


def _handler_module(resource: dict[str, Any]) -> str:
    return str(resource["Properties"]["Handler"]).rpartition(".")[0]


def _imports_agent_modules(resource: dict[str, Any]) -> bool:
    """Whether the handler's module calls import_agent_modules() when it loads."""
    path = ROOT / "functions" / Path(*_handler_module(resource).split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "import_agent_modules"
        for statement in tree.body
        for node in ast.walk(statement)
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    )


def _agent_packages(env: dict[str, Any]) -> set[str]:
    return {m.strip().split(".")[0] for m in str(env["AGENT_MODULES"]).split(",") if m.strip()}


def _function_env(resource: dict[str, Any], globals_env: dict[str, Any]) -> dict[str, Any]:
    own = resource["Properties"].get("Environment", {}).get("Variables", {})
    return {**globals_env, **own}


def _imported_roots(path: Path) -> set[str]:
    """The top-level packages a module imports (every import, wherever it stands)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


# ---------------------------------------------------------------------------------------- layer
def test_layer_leaves_out_local_mode_the_test_harness_and_the_cli(layer: Path) -> None:
    files = _files(layer)
    shipped = sorted(
        f for f in files if any(f == m or f.startswith(f"{m}/") for m in LOCAL_ONLY_MODULES)
    )
    assert shipped == [], f"the layer ships what only a laptop needs: {shipped}"
    # Nothing in the layer may need the local package either (a stale file would).
    needs_local = sorted(
        f
        for f in files
        if f.startswith("durable_agents/")
        and f.endswith(".py")
        and "durable_agents_local" in _imported_roots(layer / f)
    )
    assert needs_local == [], f"layer modules that import laptop-only code: {needs_local}"
    assert not [f for f in files if "services/payments" in f or "services/email" in f]


def test_layer_holds_the_whole_runtime(layer: Path) -> None:
    source = ROOT / "layers" / "runtime"
    runtime = {
        f
        for f in _files(source)
        if f.startswith("durable_agents/")
        and not any(f == m or f.startswith(f"{m}/") for m in LOCAL_ONLY_MODULES)
    }
    missing = sorted(runtime - _files(layer))
    assert missing == [], f"runtime modules missing from the layer: {missing}"


def test_layer_requirements_leave_out_what_only_local_mode_needs() -> None:
    closure = set(_requirement_closure())
    assert {"aws-lambda-powertools", "pydantic", "pyjwt", "cryptography", "boto3"} <= closure
    assert sorted(closure & _local_only_distributions()) == []


def test_the_developer_install_still_brings_local_mode() -> None:
    # `make venv` installs '.[dev]', which includes '.[local]': one command, local mode included.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    local = {_canonical(Requirement(r).name) for r in project["optional-dependencies"]["local"]}
    assert {"pyyaml", "moto", "werkzeug"} <= local
    assert "durable-agents[local]" in project["optional-dependencies"]["dev"]
    assert "pip install -e '.[dev]'" in (ROOT / "Makefile").read_text()


@pytest.mark.skipif(not BUILD_DIR, reason="checks a real `sam build`: make build-check")
def test_built_layer_installs_no_local_only_distribution(layer: Path) -> None:
    installed = {_canonical(p.name.split("-")[0]) for p in layer.glob("*.dist-info")}
    assert set(_requirement_closure()) <= installed
    assert sorted(installed & _local_only_distributions()) == []
    assert not (layer / "yaml").exists()


# ------------------------------------------------------------------------------------ functions
@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_package_holds_only_what_its_handler_imports(
    name: str, resources: dict[str, Any], globals_env: dict[str, Any], packages: dict[str, Path]
) -> None:
    resource = resources[name]
    expected = {_handler_module(resource).split(".")[0]}
    if _imports_agent_modules(resource):
        expected |= _agent_packages(_function_env(resource, globals_env))
    assert {p.name for p in packages[name].iterdir()} == expected


def test_only_the_relay_imports_no_agent_modules(resources: dict[str, Any]) -> None:
    # The Makefile's lists, cross-checked against the handlers' code.
    assert {n for n in FUNCTIONS if not _imports_agent_modules(resources[n])} == {"RelayFunction"}


def _lambda_env(resource: dict[str, Any], globals_env: dict[str, Any]) -> dict[str, str]:
    parameters = _template()["Parameters"]

    def value(name: str, v: Any) -> str:
        # A parameter's default, a resource's name (any string does: nothing is called).
        if isinstance(v, dict) and "Ref" in v and v["Ref"] in parameters:
            return str(parameters[v["Ref"]].get("Default", ""))
        return v if isinstance(v, str) else f"placeholder-{name.lower()}"

    env = {k: value(k, v) for k, v in _function_env(resource, globals_env).items()}
    return {
        **env,
        "PATH": os.environ.get("PATH", ""),
        "PYTHONDONTWRITEBYTECODE": "1",  # leave a real build's artifacts as they were built
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",  # no request is sent: clients are only made
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_NAMESPACE": "DurableAgents",
    }


_PROBE = """
import importlib, importlib.machinery, json, sys
allowed = set(json.loads(sys.argv[1]))
site = sys.argv[4]
refused = []
class OnlyTheLayer:
    # Refuses the installed packages the layer does not ship; the standard library is fine.
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in allowed and importlib.machinery.PathFinder.find_spec(top, [site]):
            refused.append(name)
            raise ModuleNotFoundError(f"not in the layer or the package: {name}", name=name)
        return None
sys.meta_path.insert(0, OnlyTheLayer())
# Lambda cannot write bytecode: a module whose shipped bytecode is missing or stale is compiled
# from source here at every cold start. Record each one.
from importlib import _bootstrap_external
compiled = []
to_code = _bootstrap_external.SourceLoader.source_to_code
def recording(self, data, path, *args, **kwargs):
    compiled.append(str(path))
    return to_code(self, data, path, *args, **kwargs)
_bootstrap_external.SourceLoader.source_to_code = recording
module = importlib.import_module(sys.argv[2])
if hasattr(module, "get_runtime"):
    module.get_runtime()  # what the first invocation does: clients, model scripts, agents
print(json.dumps({
    "refused": refused,
    "compiled": compiled,
    "files": sorted({m.__file__ for m in list(sys.modules.values())
                     if getattr(m, "__file__", None) and m.__name__.partition(".")[0]
                     in ("durable_agents", *json.loads(sys.argv[3]))}),
}))
"""


@pytest.mark.parametrize("name", FUNCTIONS)
def test_handlers_load_from_the_layer_and_their_package_alone(
    name: str,
    resources: dict[str, Any],
    globals_env: dict[str, Any],
    layer: Path,
    packages: dict[str, Path],
    tmp_path: Path,
) -> None:
    """Each handler imports (and builds its runtime) with only what Lambda would give it."""
    resource = resources[name]
    package = packages[name]
    # The layer's own code only: a real build's third-party wheels are for arm64/python3.13, so
    # this machine's installed copies of the same distributions stand in for them.
    code = tmp_path / "layer-code"
    code.mkdir()
    (code / "durable_agents").symlink_to(layer / "durable_agents")
    third_party = set().union(*(_top_level_names(d) for d in _requirement_closure()))
    own = sorted(p.name for p in package.iterdir())
    allowed = sorted({"durable_agents", *own, *third_party})
    site = sysconfig.get_paths()["purelib"]
    # -S: no site, so no .pth file and no editable install of the whole durable_agents; the
    # installed third-party packages are reachable, but the probe refuses any outside the layer's.
    probe = [_PROBE, json.dumps(allowed), _handler_module(resource), json.dumps(own), site]
    result = subprocess.run(
        [sys.executable, "-S", "-c", *probe],
        env={**_lambda_env(resource, globals_env), "PYTHONPATH": f"{package}:{code}:{site}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not [r for r in report["refused"] if r.partition(".")[0] in {"yaml", "moto"}]
    outside = [f for f in report["files"] if not f.startswith((str(package), str(code)))]
    assert outside == [], f"{name} loaded code from outside its package and the layer"
    # Every module of the layer and the package loads from the bytecode shipped with it (a real
    # build's is for python3.13: this interpreter would compile it when it is another one).
    if _bytecode_tag() == sys.implementation.cache_tag:
        shipped = (str(package), str(code), str(layer))
        assert [f for f in report["compiled"] if f.startswith(shipped)] == []


def _bytecode_tag() -> str:
    """The tag of the bytecode in the artifacts: a real build's python3.13, or this Python's."""
    return "cpython-313" if BUILD_DIR else sys.implementation.cache_tag


def _bytecode_of(source: Path, tag: str) -> Path:
    return source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"


def _shipped_sources(layer: Path, packages: dict[str, Path]) -> list[Path]:
    trees = [layer / "durable_agents", *(d for p in packages.values() for d in p.iterdir())]
    return sorted(f for tree in trees if tree.is_dir() for f in tree.rglob("*.py"))


def test_every_module_shipped_carries_hash_checked_bytecode_for_the_runtime(
    layer: Path, packages: dict[str, Path]
) -> None:
    # Lambda's /opt and /var/task are read-only: without bytecode in the artifacts, each cold
    # start compiles every module it imports. Timestamp-checked bytecode would not help either:
    # the zip rounds the sources' times, so each import would find it stale and compile anyway.
    tag = _bytecode_tag()
    sources = _shipped_sources(layer, packages)
    assert len(sources) > 100
    missing = [str(f) for f in sources if not _bytecode_of(f, tag).is_file()]
    assert missing == []
    checked_hash = 0b11  # PEP 552: hash-based, checked against the source at import
    flags = {int.from_bytes(_bytecode_of(f, tag).read_bytes()[4:8], "little") for f in sources}
    assert flags == {checked_hash}


@pytest.mark.skipif(not BUILD_DIR, reason="checks a real `sam build`: make build-check")
def test_built_layer_ships_bytecode_for_its_third_party_packages(layer: Path) -> None:
    for top in ("boto3", "botocore", "pydantic", "aws_lambda_powertools"):
        sources = list((layer / top).rglob("*.py"))
        missing = [f for f in sources if not _bytecode_of(f, "cpython-313").is_file()]
        assert sources and missing == [], top


def _iter_script_files(env: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for spec in str(env.get("SCRIPTED_MODEL_FILE") or "").split(","):
        target = spec.strip().rpartition("=")[2]
        if ":" in target:
            package, _, relative = target.partition(":")
            yield package, relative


@pytest.mark.parametrize("name", [n for n in FUNCTIONS if n != "RelayFunction"])
def test_model_scripts_are_in_the_packages_that_load_them(
    name: str, resources: dict[str, Any], globals_env: dict[str, Any], packages: dict[str, Path]
) -> None:
    env = _function_env(resources[name], globals_env)
    for package, relative in _iter_script_files(env):
        assert (packages[name] / package / relative).is_file(), f"{package}:{relative}"


def test_layer_markers_select_a_lambda_environment() -> None:
    # The closure above evaluates markers as Lambda would, not as this machine would.
    assert Marker('platform_machine == "aarch64"').evaluate(LAMBDA_MARKERS)
    assert not Marker('python_version < "3.12"').evaluate(LAMBDA_MARKERS)


def test_layer_wheels_match_the_layers_runtime_and_architecture(resources: dict[str, Any]) -> None:
    layer = resources["RuntimeLayer"]["Properties"]
    makefile = (ROOT / "layers" / "runtime" / "Makefile").read_text()
    # The default (what `sam build` of template.yaml installs) is the template's architecture;
    # tests/template/test_sam_local_overlay.py checks that LAYER_ARCHITECTURE switches it.
    default = re.search(r"^LAYER_ARCHITECTURE \?= (.+)$", makefile, re.MULTILINE)
    assert default is not None
    assert [default.group(1)] == layer["CompatibleArchitectures"]
    version = layer["CompatibleRuntimes"][0].removeprefix("python")
    assert f"--python-version {version}" in makefile
    assert f"PYTHON313 ?= python{version}" in makefile

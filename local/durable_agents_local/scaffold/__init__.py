"""What ``durable-agents init DIR`` writes: a SAM app of your own, outside this repository.

``app/`` holds the new app's own files (its example agent, its test, README, Makefile,
samconfig.toml), shipped as they are. ``generated/`` holds the generic parts, copied from the
durable-agents repository when the distribution is built (``make scaffold``, run by
``make dist``; ``scripts/scaffold.py``): ``template.yaml`` (its ``AGENT_MODULES`` set to the
example agent), the handlers of ``functions/`` (api, step_runner, reconciler, relay), their
``functions/Makefile`` and the runtime layer's ``layers/runtime/Makefile`` and
``requirements.txt``. The layer's ``durable_agents`` package is copied at init from the
installed runtime (``durable_agents.__file__``). ADR 0025 says why copy rather than reference.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import durable_agents

HERE = Path(__file__).resolve().parent
APP = HERE / "app"
GENERATED = HERE / "generated"
RUNTIME_PACKAGE = Path(durable_agents.__file__).resolve().parent
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


class InitError(Exception):
    """``init`` cannot write the app (the message says why)."""


def init_app(target: Path) -> list[Path]:
    """Writes a new app into ``target`` (created; must be absent or empty).

    Returns:
        The files written, relative to ``target``, sorted.

    Raises:
        InitError: If ``target`` is a non-empty directory or a file, or this install has no
            generated scaffold (a distribution built without ``make dist``).
    """
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InitError(f"{target} exists and is not an empty directory; choose a new one")
    if not (GENERATED / "template.yaml").is_file():
        raise InitError(
            f"this durable-agents install has no scaffold ({GENERATED} is missing): "
            "install a distribution built by `make dist`, or run `make scaffold` in the repository"
        )
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(GENERATED, target, dirs_exist_ok=True, ignore=_IGNORE)
    shutil.copytree(APP, target, dirs_exist_ok=True, ignore=_IGNORE)
    # Dotfiles are shipped without their dot (some packaging tools drop them).
    for name in ("gitignore",):
        if (target / name).exists():
            (target / name).rename(target / f".{name}")
    shutil.copytree(
        RUNTIME_PACKAGE, target / "layers" / "runtime" / "durable_agents", ignore=_IGNORE
    )
    return sorted(p.relative_to(target) for p in target.rglob("*") if p.is_file())


def main(target: Path) -> int:
    """``durable-agents init DIR``: 0 when written, 2 when refused."""
    try:
        files = init_app(target)
    except InitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"created {target} ({len(files)} files). Next:")
    print(f"  cd {target}")
    print("  make test    # the example agent's test (AgentTestRunner)")
    print("  make local   # local mode on http://127.0.0.1:3000, no AWS account")
    print("  make deploy  # sam build && sam deploy --guided")
    return 0

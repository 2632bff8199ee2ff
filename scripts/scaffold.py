"""Copies the generic parts of a `durable-agents init` app into the package's scaffold.

Run by `make scaffold` (and `make dist`, before it builds): writes
local/durable_agents_local/scaffold/generated/ (not in git) from this repository's
template.yaml, the handlers of functions/ and the runtime layer's build files, so the
distribution ships them and `durable-agents init` never reads a working tree (ADR 0025).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "local" / "durable_agents_local" / "scaffold" / "generated"
HANDLERS = ("api", "step_runner", "reconciler", "relay")
AGENT_MODULES = "agents.hello"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def app_template(text: str) -> str:
    """This repository's template, loading the new app's example agent instead of ours."""
    text, found = re.subn(r"(?m)^(\s+AGENT_MODULES: ).*$", rf"\g<1>{AGENT_MODULES}", text)
    assert found == 1, "template.yaml: expected one AGENT_MODULES line"
    # Our example agents' model scripts (functions/agents/scripts/): the new app has none.
    text, found = re.subn(
        r"(?m)^\s+# The example agents' model is scripted.*\n"
        r"(?:\s+#.*\n)*\s+SCRIPTED_MODEL_FILE: .*\n",
        "",
        text,
    )
    assert found == 1, "template.yaml: expected one SCRIPTED_MODEL_FILE line and its comment"
    return text


def main() -> int:
    """Writes the generated scaffold afresh."""
    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "functions").mkdir(parents=True)
    (OUT / "template.yaml").write_text(app_template((ROOT / "template.yaml").read_text()))
    for handler in HANDLERS:
        shutil.copytree(ROOT / "functions" / handler, OUT / "functions" / handler, ignore=IGNORE)
    shutil.copy2(ROOT / "functions" / "Makefile", OUT / "functions" / "Makefile")
    (OUT / "layers" / "runtime").mkdir(parents=True)
    for name in ("Makefile", "requirements.txt"):
        shutil.copy2(ROOT / "layers" / "runtime" / name, OUT / "layers" / "runtime" / name)
    print(f"scaffold: wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

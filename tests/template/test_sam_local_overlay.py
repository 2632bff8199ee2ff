"""The overlay `make sam-local` runs differs from template.yaml only where ADR 0028 says it may.

`sam local` passes a function only the variables its template declares, so the overlay declares
the local ones (empty; values come from the `--env-vars` file), and it builds for the machine's
architecture. Nothing else may change, so `sam local` stays honest about the deployed template;
and the deployed template never declares what turns on the Api's emulation of IAM
(`api.sam_emulator`) or redirects the SDK.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from durable_agents_local.template import load_template

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from sam_local import EXPECTED, documented_invokes  # noqa: E402
from sam_local_overlay import overlay  # noqa: E402

TEMPLATE = load_template(ROOT / "template.yaml")
LOCAL_ONLY = ("SAM_LOCAL_TOKEN", "SAM_LOCAL_CALLER_ARN", "AWS_ENDPOINT_URL")
FUNCTIONS = ["StepRunnerFunction", "ApiFunction", "ReconcilerFunction", "RelayFunction"]


def _made(architecture: str = "x86_64") -> dict[str, Any]:
    declared = {fn: ["AWS_ENDPOINT_URL", "JOURNAL_TABLE"] for fn in FUNCTIONS}
    declared["ApiFunction"] += ["SAM_LOCAL_TOKEN", "SAM_LOCAL_CALLER_ARN"]
    return overlay(TEMPLATE, template_dir=ROOT, architecture=architecture, declared=declared)


def _undo(made: dict[str, Any]) -> dict[str, Any]:
    """The overlay with the changes it may make put back: what remains must be template.yaml."""
    undone = copy.deepcopy(made)
    undone["Globals"]["Function"]["Architectures"] = TEMPLATE["Globals"]["Function"][
        "Architectures"
    ]
    for logical_id, resource in undone["Resources"].items():
        original = TEMPLATE["Resources"][logical_id].get("Properties", {})
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri", "CompatibleArchitectures"):
            if key in properties:
                properties[key] = original[key]
        variables = (properties.get("Environment") or {}).get("Variables")
        if variables is not None:
            kept = (original.get("Environment") or {}).get("Variables") or {}
            for name in [n for n in variables if n not in kept]:
                assert variables[name] == "", f"{logical_id} declares {name} with a value"
                del variables[name]
            if not variables and "Environment" not in original:
                del properties["Environment"]
    return undone


@pytest.mark.parametrize("architecture", ["x86_64", "arm64"])
def test_the_overlay_is_the_template_plus_declarations_and_the_architecture(
    architecture: str,
) -> None:
    made = _made(architecture)
    assert made["Globals"]["Function"]["Architectures"] == [architecture]
    assert made["Resources"]["RuntimeLayer"]["Properties"]["CompatibleArchitectures"] == [
        architecture
    ]
    for fn in FUNCTIONS:
        variables = made["Resources"][fn]["Properties"]["Environment"]["Variables"]
        assert variables["AWS_ENDPOINT_URL"] == ""
        assert Path(made["Resources"][fn]["Properties"]["CodeUri"]).is_absolute()
    assert _undo(made) == TEMPLATE
    assert load_template(ROOT / "template.yaml") == TEMPLATE, "the template was changed"


def test_the_overlay_keeps_a_declared_value() -> None:
    # JOURNAL_TABLE is declared by the Globals: its value (!Ref JournalTable) stays.
    made = _made()
    for fn in FUNCTIONS:
        assert (
            "JOURNAL_TABLE" not in made["Resources"][fn]["Properties"]["Environment"]["Variables"]
        )
    assert made["Globals"]["Function"]["Environment"]["Variables"]["JOURNAL_TABLE"] == {
        "Ref": "JournalTable"
    }


def test_the_overlay_refuses_what_is_not_a_function() -> None:
    with pytest.raises(KeyError, match="not a function"):
        overlay(TEMPLATE, template_dir=ROOT, architecture="x86_64", declared={"JournalTable": []})


def test_the_deployed_template_never_declares_the_local_only_variables() -> None:
    text = json.dumps(TEMPLATE)
    for name in LOCAL_ONLY:
        assert name not in text, f"template.yaml must not declare {name} (ADR 0028)"


def test_the_docs_invoke_every_function_with_every_event() -> None:
    commands = documented_invokes()
    pairs = {(fn, event) for fn, event, _ in commands}
    assert pairs == set(EXPECTED)
    events = {p.relative_to(ROOT).as_posix() for p in (ROOT / "events").glob("*.json")}
    assert {event for _, event in pairs} == events, "an event of events/ is invoked by nobody"
    assert all(argv[-1] == "$SAM_LOCAL_FLAGS" for _, _, argv in commands)


def test_a_documented_line_that_is_not_an_invoke_is_refused() -> None:
    from sam_local import CheckFailedError

    text = "<!-- sam-local-invokes -->\n```bash\nsam local start-api $SAM_LOCAL_FLAGS\n```\n"
    with pytest.raises(CheckFailedError, match="not a `sam local invoke"):
        documented_invokes(text)
    with pytest.raises(CheckFailedError, match="no <!-- sam-local-invokes -->"):
        documented_invokes("nothing here")


@pytest.mark.parametrize(("architecture", "machine"), [("arm64", "aarch64"), ("x86_64", "x86_64")])
def test_the_layer_is_built_for_the_architecture_asked_for(architecture: str, machine: str) -> None:
    printed = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(ROOT / "layers" / "runtime"),
            "--eval",
            "print-platforms: ; @echo $(WHEEL_PLATFORMS)",
            "print-platforms",
            f"LAYER_ARCHITECTURE={architecture}",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert printed and all(tag.endswith(f"_{machine}") for tag in printed), printed

"""Reading ``template.yaml``: local mode and the test suite provision from the same declaration.

Nothing here creates resources on AWS; on AWS the template is deployed by ``sam deploy``.
Local mode and tests read it so that the moto table, bus and rules can never drift from what
is deployed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# libyaml's parser when PyYAML was built with it: the same documents, ~8x faster on the 1,300
# lines of template.yaml (which local mode and every moto-backed test fixture parse).
try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - a PyYAML without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _CfnLoader(_SafeLoader):
    """A YAML loader that accepts CloudFormation short-form tags (``!Ref``, ``!Sub``, …)."""


def _tag_constructor(loader: _SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if tag_suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CfnLoader.add_multi_constructor("!", _tag_constructor)


def load_template(path: str | Path) -> dict[str, Any]:
    """Parses a SAM/CloudFormation template, short-form tags included.

    Raises:
        FileNotFoundError: If the template does not exist.
        yaml.YAMLError: If it is not valid YAML.
    """
    with open(path, encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - a SafeLoader subclass
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a template")
    return data


def resource(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    """Returns one resource of the template.

    Raises:
        KeyError: If the template has no such resource.
    """
    resources = template.get("Resources", {})
    if logical_id not in resources:
        raise KeyError(f"template has no resource {logical_id!r}")
    return dict(resources[logical_id])


def table_definition(template: dict[str, Any], logical_id: str = "JournalTable") -> dict[str, Any]:
    """Returns ``create_table`` arguments for a table declared in the template.

    Only the parts that shape behaviour are carried over (keys, indexes, billing, stream);
    PITR, SSE and deletion protection have no local meaning.
    """
    props = resource(template, logical_id)["Properties"]
    args: dict[str, Any] = {
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        args["GlobalSecondaryIndexes"] = [
            {
                "IndexName": g["IndexName"],
                "KeySchema": g["KeySchema"],
                "Projection": g["Projection"],
            }
            for g in props["GlobalSecondaryIndexes"]
        ]
    stream = props.get("StreamSpecification")
    if stream:
        args["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": stream["StreamViewType"],
        }
    return args


def create_journal_table(
    client: Any, table_name: str, template_path: str | Path = "template.yaml"
) -> None:
    """Creates the journal table in moto exactly as the template declares it."""
    definition = table_definition(load_template(template_path))
    client.create_table(TableName=table_name, **definition)
    client.get_waiter("table_exists").wait(TableName=table_name)


PROJECT_TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
"""The project's own template, beside the runtime's sources (a clone / editable install)."""


def default_template(cwd: Path | None = None) -> Path:
    """The template local mode runs when ``--template`` is not given.

    ``template.yaml`` in the working directory if there is one (your own project), else the
    project's own, so ``durable-agents local --agents mymodule`` works from any directory.

    Raises:
        FileNotFoundError: If neither exists (an installed package without its template).
    """
    here = (cwd or Path.cwd()) / "template.yaml"
    if here.is_file():
        return here
    if PROJECT_TEMPLATE.is_file():
        return PROJECT_TEMPLATE
    raise FileNotFoundError(
        f"no template.yaml in {here.parent} and none beside durable_agents_local; pass --template"
    )

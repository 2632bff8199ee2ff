"""Old import paths (before the 0.2 layout) work for one release, with a warning (ADR 0020)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import durable_agents
from durable_agents._moved import MODULES
from durable_agents.core.models import ErrorInfo
from durable_agents.core.serde_errors import rebuild_error
from durable_agents.tools import ToolRejectedError


def test_an_old_module_path_is_the_new_module_and_warns() -> None:
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "try:\n    import durable_agents.models\nexcept DeprecationWarning as w:\n    print(w)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "durable_agents.models moved to durable_agents.core.models" in out.stdout
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("durable_agents.side_effects.tools")
    assert old.ToolRejectedError is ToolRejectedError


def test_every_old_path_resolves() -> None:
    for old, new in MODULES.items():
        if new.startswith("durable_agents_local"):
            continue  # checked by the CLI and harness tests (local mode's own dependencies)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # warned once per process
            assert importlib.import_module(old) is importlib.import_module(new), old


def test_root_names_that_moved_warn_and_resolve() -> None:
    with pytest.warns(DeprecationWarning, match="durable_agents.engine.runtime.Runtime"):
        runtime = durable_agents.Runtime
    assert runtime is importlib.import_module("durable_agents.engine.runtime").Runtime
    with pytest.raises(AttributeError):
        durable_agents.NoSuchName  # noqa: B018


def test_an_error_recorded_under_its_old_module_rebuilds_as_its_class() -> None:
    # A journal written before 0.2 says where the class lived then.
    rebuilt = rebuild_error(
        ErrorInfo("ToolRejectedError", "no", "durable_agents.side_effects.tools")
    )
    assert type(rebuilt) is ToolRejectedError
    refused = rebuild_error(
        ErrorInfo("ModelRequestError", "bad", "durable_agents.llm.bedrock", {"code": "X"})
    )
    assert type(refused).__name__ == "ModelRequestError" and refused.code == "X"  # type: ignore[attr-defined]


def test_the_jwt_names_auth_deciders_re_exported_warn_and_resolve() -> None:
    # auth.deciders (and so the old durable_agents.waits.auth) keeps only the IAM caller; the
    # JWT stack it re-exported lives in auth.jwt, auth.jwks and auth.tokens.
    from durable_agents.auth import deciders, jwks, jwt, tokens

    for name, home in (
        ("JwtVerifier", jwt),
        ("jwt_verifier_from_env", jwt),
        ("fetch_json", jwks),
        ("AuthUnavailableError", tokens),
        ("bearer_token", tokens),
    ):
        with pytest.warns(DeprecationWarning, match=f"{home.__name__}.{name}"):
            assert getattr(deciders, name) is getattr(home, name)
    with pytest.raises(AttributeError):
        _ = deciders.NoSuchName


def test_the_agent_modules_names_deployment_had_warn_and_resolve() -> None:
    # Handlers import the settings at init (aws.settings) and the wiring at their first
    # invocation (aws.deployment); a handler written against 0.1 keeps working for a release.
    from durable_agents.aws import deployment, settings

    with pytest.warns(DeprecationWarning, match="durable_agents.aws.settings.import_agent_modules"):
        assert deployment.import_agent_modules is settings.import_agent_modules
    assert deployment.Settings is settings.Settings  # used by the wiring itself: no warning


def test_the_migration_errors_live_with_the_other_domain_errors() -> None:
    # The Api maps them to 409 without loading the migrations module at init; an error recorded
    # under its old module (an Api answer or a CLI's saved output) still rebuilds as its class.
    from durable_agents import errors, migrations

    with pytest.warns(DeprecationWarning, match="durable_agents.errors.MigrationNotFoundError"):
        assert migrations.MigrationNotFoundError is errors.MigrationNotFoundError
    assert migrations.MigrationRefusedError is errors.MigrationRefusedError  # it raises it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a record is rebuilt from the class's home, silently
        rebuilt = rebuild_error(
            ErrorInfo("MigrationNotFoundError", "no", "durable_agents.migrations")
        )
    assert type(rebuilt) is errors.MigrationNotFoundError
    with pytest.raises(AttributeError):
        _ = migrations.NoSuchName

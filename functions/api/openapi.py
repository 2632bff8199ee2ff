"""The Api's OpenAPI 3.1 document: Powertools' generator, completed from the routes' own models.

Powertools generates the paths, operation ids and path parameters from the resolver's routes.
The routes parse their bodies themselves (``api.routes.limits``) rather than through Powertools
validation, which would change the Api's error answers, so the generator sees no bodies: this
module adds each operation's request body (the JSON schema of the pydantic model the route
validates with), query and header parameters, responses with the error shape, and security
(SigV4 for every route but the /people routes, a JWT bearer, and the /links routes, a signed
link token). ``OPERATIONS`` must name every route: ``build_document`` refuses a route it does
not know, so a new route cannot be published undocumented.

Served at ``GET /openapi.json`` (IAM, like the rest); ``docs/openapi.json`` is a copy that
``make openapi`` (``scripts/openapi.py``) regenerates and a test keeps current.
"""

from __future__ import annotations

import copy
import inspect
import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.openapi.dependant import get_dependant
from pydantic import BaseModel

from api.openapi_operations import Operation, operations

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.api_gateway import APIGatewayRestResolver

TITLE = "durable-agents Api"
VERSION = "1"

SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "sigv4": {
        "type": "apiKey",
        "name": "Authorization",
        "in": "header",
        "description": "AWS Signature Version 4 (API Gateway AWS_IAM): the caller needs "
        "execute-api:Invoke on the method.",
        "x-amazon-apigateway-authtype": "awsSigv4",
    },
    "jwt": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "An RS256/ES256 JWT from JWT_ISSUER for JWT_AUDIENCE, verified by the "
        "function against the issuer's JWKS (API Gateway auth NONE).",
    },
    "link": {
        "type": "apiKey",
        "name": "token",
        "in": "query",
        "description": "The token of a signed approval link (HMAC, expiring, bound to one "
        "approval and one approver), verified by the function (API Gateway auth NONE). "
        "POST also takes it as the body's `token` field.",
    },
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every rejection: what is wrong, never a stack trace.",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string", "description": "The error's name, e.g. BadRequest."},
                "message": {"type": "string"},
                "details": {"type": "array", "description": "What did not match (422)."},
                "run_id": {"type": "string", "description": "The run an idempotency key names."},
                "current": {"type": "object", "description": "The state already recorded."},
            },
            "additionalProperties": True,
        }
    },
}

ERROR_DESCRIPTIONS = {
    400: "Malformed request (not JSON, a parameter out of range, an id that cannot be one)",
    401: "No or invalid credentials",
    403: "Authenticated, but not allowed; or a state-changing request from another site",
    404: "No such resource",
    409: "Already decided or completed (the current state is in `error.current`)",
    410: "Gone: its deadline passed, or it was closed because its run was stopped or had finished",
    413: "Body too large",
    415: "The body is not `application/json` (or a form, where a page posts one)",
    422: "The body does not match the schema",
    503: "A dependency is unavailable or not configured; retry (`Retry-After`)",
}
# Every operation may answer these: 400 (a path segment over 512 bytes, refused before routing)
# and 503 (the journal or bus unavailable; auth not configured).
COMMON_ERRORS = (400, 401, 403, 503)


class UndocumentedRouteError(Exception):
    """A route of the resolver has no entry in ``operations()``, or an entry has no route.

    Attributes:
        missing: (method, path) of routes that ``operations()`` does not describe.
        stale: (method, path) entries of ``operations()`` that no route serves.
    """

    def __init__(self, missing: set[tuple[str, str]], stale: set[tuple[str, str]]):
        self.missing, self.stale = missing, stale
        super().__init__(
            f"routes without an OpenAPI entry: {sorted(missing)}; "
            f"entries without a route: {sorted(stale)}"
        )


def _summary_and_description(func: Any) -> tuple[str, str]:
    doc = inspect.getdoc(inspect.unwrap(func)) or ""
    lines = doc.split("\n")
    rest: list[str] = []
    for line in lines[1:]:
        if line.strip() in ("Raises:", "Args:", "Returns:"):
            break
        rest.append(line)
    return lines[0].strip(), "\n".join(rest).strip()


def _model_schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """Registers ``model`` (and what it refers to) in ``schemas``; returns a reference to it."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _request_body(op: Operation, schemas: dict[str, Any]) -> dict[str, Any] | None:
    if op.body is None:
        return None
    if op.body == "any":
        content: dict[str, Any] = {
            "application/json": {"schema": {"description": "Any JSON value (empty: null)."}}
        }
    else:
        ref = _model_schema(op.body, schemas)
        content = {"application/json": {"schema": ref}}
        if op.form:  # the approval page's form posts the same fields
            content["application/x-www-form-urlencoded"] = {"schema": ref}
        if op.html_only:  # a console action: its page's form only
            content = {"application/x-www-form-urlencoded": {"schema": ref}}
    if op.example is not None and "application/json" in content:
        content["application/json"]["example"] = op.example
    return {"required": op.body_required, "content": content}


def _responses(op: Operation) -> dict[str, Any]:
    ok_content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if op.html_only:
        ok_content = {}
    if op.html or op.html_only:
        ok_content["text/html"] = {"schema": {"type": "string"}}
    if op.event_stream:
        ok_content["text/event-stream"] = {"schema": {"type": "string"}}
    error_content: dict[str, Any] = {
        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
    }
    if op.html or op.html_only:  # a browser that prefers HTML gets an error page
        error_content["text/html"] = {"schema": {"type": "string"}}
    success = "See Other: back to the console page (Location)" if op.success == 303 else "Success"
    responses: dict[str, Any] = {str(op.success): {"description": success, "content": ok_content}}
    if op.also is not None:
        status, meaning = op.also
        responses[str(status)] = {"description": meaning, "content": copy.deepcopy(ok_content)}
    # A body of another type is refused before routing (api.cross_site): 415.
    typed = (415,) if op.body is not None else ()
    for status in sorted({*COMMON_ERRORS, *op.errors, *typed}):
        responses[str(status)] = {
            "description": ERROR_DESCRIPTIONS[status],
            "content": copy.deepcopy(error_content),
        }
    return dict(sorted(responses.items()))


def _parameters(op: Operation, generated: list[dict[str, Any]]) -> list[dict[str, Any]]:
    params = [p for p in generated if p.get("in") == "path"]
    for p in params:  # every id travels as one path segment of at most 512 bytes
        p["schema"] = {**p.get("schema", {}), "type": "string", "minLength": 1}
    for where, group in (("query", op.query), ("header", op.headers)):
        for param in group:
            entry: dict[str, Any] = {"name": param.name, "in": where, "required": False}
            entry["schema"] = dict(param.schema)
            if param.description:
                entry["description"] = param.description
            params.append(entry)
    return params


def _fix_forward_references(app: APIGatewayRestResolver) -> None:
    """Lets Powertools read the signature of the function under each route's decorators.

    A ``@tracer.capture_method`` wrapper has the tracer module's globals, where the route's
    string annotations (``from __future__ import annotations``) cannot be resolved.
    """
    for route in app._static_routes + app._dynamic_routes:
        route._dependant = get_dependant(
            path=route.openapi_path, call=inspect.unwrap(route.func), responses=route.responses
        )


def build_document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (Powertools' generator, completed from ``operations()``).

    Raises:
        UndocumentedRouteError: If a route has no entry in ``operations()`` or the reverse.
    """
    _fix_forward_references(app)
    generated = json.loads(app.get_openapi_json_schema(title=TITLE, version=VERSION))
    ops = operations()
    routes = {
        (r.method.upper(), r.openapi_path): r for r in app._static_routes + app._dynamic_routes
    }
    found = {(m.upper(), p) for p, methods in generated["paths"].items() for m in methods}
    if found != set(ops) or set(routes) != set(ops):
        raise UndocumentedRouteError(set(routes) - set(ops), set(ops) - set(routes))
    schemas: dict[str, Any] = {"ErrorResponse": ERROR_SCHEMA}
    paths: dict[str, Any] = {}
    for path in sorted(generated["paths"]):
        for method, operation in sorted(generated["paths"][path].items()):
            op = ops[(method.upper(), path)]
            summary, description = _summary_and_description(routes[(method.upper(), path)].func)
            entry: dict[str, Any] = {
                "operationId": operation["operationId"],
                "summary": summary,
                "tags": list(op.tags),
            }
            if description:
                entry["description"] = description
            params = _parameters(op, operation.get("parameters", []))
            if params:
                entry["parameters"] = params
            body = _request_body(op, schemas)
            if body is not None:
                entry["requestBody"] = body
            entry["responses"] = _responses(op)
            entry["security"] = [{op.security: []}]
            paths.setdefault(path, {})[method] = entry
    return {
        "openapi": generated["openapi"],
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": "Runs, reviews, approvals and callbacks of durable-agents. "
            "Every route is SigV4 (API Gateway AWS_IAM) except /people (JWT) and /links "
            "(signed link token), which the function authenticates itself.",
        },
        "servers": [
            {"url": "http://127.0.0.1:3000", "description": "local mode (make local)"},
            {
                "url": "https://{apiId}.execute-api.{region}.amazonaws.com/{stage}",
                "description": "the deployed Api (the stack's ApiUrl output)",
                "variables": {
                    "apiId": {"default": "abcdefghij"},
                    "region": {"default": "us-east-1"},
                    "stage": {"default": "dev"},
                },
            },
        ],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": SECURITY_SCHEMES,
        },
        "security": [{"sigv4": []}],
    }


def document_json(app: APIGatewayRestResolver) -> str:
    """``build_document(app)`` as the text ``docs/openapi.json`` holds (stable, sorted keys)."""
    return json.dumps(build_document(app), indent=2, sort_keys=False, ensure_ascii=False) + "\n"

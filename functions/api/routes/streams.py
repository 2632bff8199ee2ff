"""``GET /runs/{run_id}/stream``: what the run streamed after a cursor (SSE or long-poll JSON).

A browser that refreshes reconnects with the last cursor it saw (``after``, or the
``Last-Event-ID`` header an ``EventSource`` sends) and continues exactly where it was. A
``begin`` event for an attempt above 1 means that operation's text restarts: its step crashed
mid-stream and ran again. This is the stream cache, not run state: losing it loses no progress.
"""

from __future__ import annotations

import json
import time
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

from api.routes.common import BadRequest, header, ok
from api.routes.limits import check_key
from api.routes.tenancy import iam_caller, owned_run
from api.services import get_runtime
from durable_agents.core.ids import check_run_id
from durable_agents.llm.streams import StreamCache, StreamChunk

router = Router()  # type: ignore[no-untyped-call]
# Bounded so a poll holds an Api invocation (and a unit of its concurrency) for at most 10 s:
# the client reconnects with its cursor, which costs a request and loses nothing.
MAX_WAIT_SECONDS = 10
POLL_SECONDS = 0.25


def _event() -> APIGatewayProxyEvent:
    event = router.current_event
    assert isinstance(event, APIGatewayProxyEvent)
    return event


def _chunk_json(chunk: StreamChunk) -> dict[str, Any]:
    return {
        "cursor": chunk.cursor,
        "kind": chunk.kind,
        "operation_id": chunk.operation_id,
        "attempt": chunk.attempt,
        "text": chunk.text,
        "restart": chunk.kind == "begin" and chunk.attempt > 1,
    }


def _sse(chunks: list[StreamChunk], done_status: str | None) -> str:
    lines = ["retry: 1000", ""]
    for chunk in chunks:
        data = _chunk_json(chunk)
        data.pop("cursor")
        lines += [f"id: {chunk.cursor}", f"event: {chunk.kind}", f"data: {json.dumps(data)}", ""]
    if done_status is not None:
        lines += ["event: done", f"data: {json.dumps({'status': done_status})}", ""]
    return "\n".join(lines) + "\n"


@router.get("/runs/<run_id>/stream")
def get_stream(run_id: str) -> Response[str]:
    """Returns the chunks after ``after``; ``wait`` (0-10 s) holds the request for new ones.

    Raises:
        BadRequest: If ``wait`` is not a number in range, ``after`` is not a cursor, or
            streaming is not configured.
        InvalidNameError: If ``run_id`` cannot be a run id (400).
        RunNotFoundError: If there is no such run, or it is another tenant's (404).
    """
    event = _event()
    _, tenant = iam_caller(event)
    rt = get_runtime()
    run = owned_run(tenant, check_run_id(run_id))
    cache = rt.stream_sink
    if not isinstance(cache, StreamCache):
        raise BadRequest("streaming is not configured (STREAM_TABLE is not set)")
    params = event.query_string_parameters or {}
    after = params.get("after") or header(event, "Last-Event-ID")
    if after is not None:
        check_key(after, "the cursor (after or Last-Event-ID)")
    try:
        wait_seconds = float(params.get("wait", "0"))
    except ValueError as exc:
        raise BadRequest("wait must be a number of seconds") from exc
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise BadRequest(f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
    page = cache.read(run_id, after=after)
    deadline = time.monotonic() + wait_seconds
    while not page.chunks and not run.status.terminal and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)  # API Gateway buffers responses: a long poll is how we wait
        page = cache.read(run_id, after=after)
        run = rt.store.get_run(run_id)
    done = run.status.terminal and not page.chunks
    if "text/event-stream" in (header(event, "Accept") or ""):
        return Response(
            status_code=HTTPStatus.OK.value,
            content_type="text/event-stream",
            body=_sse(page.chunks, run.status.value if done else None),
            headers={"Cache-Control": "no-cache"},
        )
    return ok(
        HTTPStatus.OK,
        {
            "run_id": run_id,
            "status": run.status.value,
            "cursor": page.cursor,
            "done": done,
            "chunks": [_chunk_json(c) for c in page.chunks],
        },
    )

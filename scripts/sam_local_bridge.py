"""EventBridge for `make sam-local`: each `Step Ready` event goes to `sam local start-lambda`.

SAM emulates Lambda (`sam local start-lambda`) and API Gateway (`sam local start-api`), not
EventBridge: an event the functions put on the bus would reach no function. Local mode already
delivers the template's EventBridge rules itself (`durable_agents_local.event_router`: each rule
targets an SQS queue in moto, consumer threads take one message at a time and delete it only
once the function returned). This reuses those consumers and swaps what they call: instead of
the handler in this process, the function in a Lambda container, through start-lambda's
endpoint (the Lambda Invoke API), so a failed invocation leaves its message to be delivered
again, as Lambda's retries and the rule's dead-letter queue would.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config

from durable_agents_local.event_router import QueueConsumers
from durable_agents_local.provision import RuleQueue

log = logging.getLogger("sam_local")


class FunctionFailedError(RuntimeError):
    """The function raised (start-lambda answered with a ``FunctionError``)."""


class StartLambdaFunction:
    """A template function, invoked in a container through `sam local start-lambda`.

    Args:
        endpoint: start-lambda's URL (``http://127.0.0.1:<port>``).
        logical_id: The function's logical id (the name start-lambda knows it by).
        timeout_seconds: How long to wait for one invocation (its Timeout and a cold start).
        region: Any region (start-lambda ignores it).
    """

    def __init__(
        self, endpoint: str, logical_id: str, *, timeout_seconds: float, region: str
    ) -> None:
        self.logical_id = logical_id
        self._client = boto3.client(
            "lambda",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id="sam-local",
            aws_secret_access_key="sam-local",
            config=Config(
                read_timeout=timeout_seconds,
                connect_timeout=10,
                retries={"max_attempts": 1, "mode": "standard"},
            ),
        )
        self.invocations = 0
        self._lock = threading.Lock()

    def invoke(self, event: dict[str, Any], *, note: str = "") -> Any:
        """Runs the function with ``event`` in a container and returns what it returned.

        Raises:
            FunctionFailedError: If the function raised (its message is delivered again).
            botocore.exceptions.BotoCoreError, ClientError: If start-lambda did not answer.
        """
        started = time.monotonic()
        with self._lock:
            self.invocations += 1
        answer = self._client.invoke(
            FunctionName=self.logical_id, Payload=json.dumps(event).encode()
        )
        payload = answer["Payload"].read().decode("utf-8", "replace")
        took = time.monotonic() - started
        detail = event.get("detail") if isinstance(event.get("detail"), dict) else {}
        run = detail.get("run_id", "") if isinstance(detail, dict) else ""
        if answer.get("FunctionError"):
            log.warning("%s %s failed (%.2fs) %s: %s", self.logical_id, run, took, note, payload)
            raise FunctionFailedError(f"{self.logical_id} failed: {payload[:500]}")
        log.info("%s %s -> %s (%.2fs) %s", self.logical_id, run, payload[:120], took, note)
        return json.loads(payload) if payload else None


def deliver(
    sqs: Any,
    queues: Sequence[RuleQueue],
    functions: dict[str, StartLambdaFunction],
    *,
    region: str,
    visibility_timeout: int,
    stop: threading.Event,
    concurrency: int = 2,
) -> list[QueueConsumers]:
    """Starts consumers that deliver each rule's events to its function through start-lambda.

    Args:
        sqs: An SQS client of the moto store.
        queues: The rules' queues (``durable_agents_local.provision.provision``).
        functions: Logical id -> the function to deliver to; rules of other functions are
            left undelivered (their events wait in their queues).
        region: The local region (filled into events moto leaves it out of).
        visibility_timeout: The queues' visibility timeout, in seconds.
        stop: Set it to stop; deliveries in progress finish.
        concurrency: Deliveries at once per rule.

    Returns:
        The started consumers (``join`` them after setting ``stop``).
    """
    consumers = []
    for queue in queues:
        function = functions.get(queue.function_id)
        if function is None:
            continue
        consumer = QueueConsumers(
            sqs,
            queue,
            function,
            region=region,
            concurrency=concurrency,
            visibility_timeout=visibility_timeout,
            stop=stop,
        )
        consumer.start()
        consumers.append(consumer)
    return consumers

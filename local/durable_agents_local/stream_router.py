"""DynamoDB stream → handler: the local delivery of a function's ``DynamoDB`` events.

One poller thread per stream event reads the table's stream in moto, keeps the records that
match the event's filters, and invokes the function with batches of at most ``BatchSize``
records, in order. After a batch succeeds its position is checkpointed in a small table in
moto, so a restarted (or killed) worker resumes where the last one stopped and delivers a
batch at least once, as Lambda does. A batch that raises, or reports ``batchItemFailures``,
is retried from the first failed record about once a second; after ``MaximumRetryAttempts``
retries it is given up on and described in the event's dead-letter queue.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from durable_agents_local.functions import StreamEvent
from durable_agents_local.invoke import LocalFunction
from durable_agents_local.patterns import matches_any

log = logging.getLogger("durable_agents_local")

POLL_SECONDS = 0.5
READ_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class StreamRoute:
    """A provisioned stream event.

    Attributes:
        function_id: The function's logical id.
        event: The event as the template declares it.
        stream_arn: The table's stream in moto.
        checkpoint_table: Where positions are kept.
        dead_letter_url: Where given-up batches are described.
    """

    function_id: str
    event: StreamEvent
    stream_arn: str
    checkpoint_table: str
    dead_letter_url: str


def _seq(record: dict[str, Any]) -> int:
    return int(record["dynamodb"]["SequenceNumber"])


class StreamPoller:
    """Reads one stream for one function (see the module docstring).

    Args:
        clients: Has ``dynamodb``, ``dynamodbstreams`` and ``sqs`` clients for moto.
        route: The stream event.
        function: The function to invoke.
        stop: Set to stop; a batch already running finishes.
    """

    def __init__(
        self, clients: Any, route: StreamRoute, function: LocalFunction, stop: threading.Event
    ):
        self._clients = clients
        self._route = route
        self._function = function
        self._stop = stop
        self._iterators: dict[str, str | None] = {}
        self._attempts: dict[tuple[str, int], int] = {}
        self._name = f"{route.function_id}{route.event.event_id}"
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)

    def start(self) -> None:
        """Starts the poller thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the poller to end (after ``stop`` is set)."""
        self._thread.join(timeout)

    # -- checkpoints -------------------------------------------------------------------------

    def _key(self, shard_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"{self._name}#{shard_id}"}}

    def _checkpoint(self, shard_id: str) -> str | None:
        item = self._clients.dynamodb.get_item(
            TableName=self._route.checkpoint_table, Key=self._key(shard_id), ConsistentRead=True
        ).get("Item")
        return str(item["sequence"]["S"]) if item else None

    def _save(self, shard_id: str, sequence: int) -> None:
        self._clients.dynamodb.put_item(
            TableName=self._route.checkpoint_table,
            Item={**self._key(shard_id), "sequence": {"S": str(sequence)}},
        )

    # -- reading -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                shards = self._clients.dynamodbstreams.describe_stream(
                    StreamArn=self._route.stream_arn
                )["StreamDescription"].get("Shards", [])
                for shard in shards:
                    self._drain(str(shard["ShardId"]))
            except (BotoCoreError, ClientError) as exc:
                # A restarted store forgot its iterators: re-open from the checkpoints.
                self._iterators.clear()
                if not self._stop.is_set():
                    log.warning("%s: reading the stream failed: %s", self._name, exc)

    def _open(self, shard_id: str) -> str:
        streams = self._clients.dynamodbstreams
        args: dict[str, Any] = {"StreamArn": self._route.stream_arn, "ShardId": shard_id}
        last = self._checkpoint(shard_id)
        if last is not None:
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=last)
        else:
            args["ShardIteratorType"] = self._route.event.starting_position
        return str(streams.get_shard_iterator(**args)["ShardIterator"])

    def _drain(self, shard_id: str) -> None:
        iterator = self._iterators.get(shard_id) or self._open(shard_id)
        page = self._clients.dynamodbstreams.get_records(ShardIterator=iterator, Limit=READ_LIMIT)
        records: list[dict[str, Any]] = page.get("Records", [])
        if records:
            event = self._route.event
            wanted = [r for r in records if matches_any(event.filters, r)]
            for start in range(0, len(wanted), event.batch_size):
                if self._stop.is_set() or not self._deliver(
                    shard_id, wanted[start : start + event.batch_size]
                ):
                    self._iterators[shard_id] = None  # re-read from the checkpoint
                    return
            self._save(shard_id, _seq(records[-1]))
        self._iterators[shard_id] = page.get("NextShardIterator")

    # -- delivering --------------------------------------------------------------------------

    def _deliver(self, shard_id: str, batch: Sequence[dict[str, Any]]) -> bool:
        """Invokes the function with ``batch``; False if it must be retried."""
        records = [{**r, "eventSourceARN": self._route.stream_arn} for r in batch]
        key = (shard_id, _seq(batch[0]))
        attempt = self._attempts.get(key, 0) + 1
        failed_at = 0
        try:
            result = self._function.invoke(
                {"Records": records}, note=f"attempt {attempt}" if attempt > 1 else ""
            )
            failed_at = self._first_failure(batch, result)
        except Exception:  # logged by invoke; the batch is retried
            failed_at = 0
        else:
            if failed_at < 0:
                self._attempts.pop(key, None)
                self._save(shard_id, _seq(batch[-1]))
                return True
        if failed_at > 0:
            self._save(shard_id, _seq(batch[failed_at - 1]))
        retries = self._route.event.max_retries
        if 0 <= retries < attempt:
            self._give_up(shard_id, batch[failed_at:], attempt)
            self._attempts.pop(key, None)
            self._save(shard_id, _seq(batch[-1]))
            return True
        # The retry starts at the first failed record (the checkpoint is just before it).
        self._attempts[(shard_id, _seq(batch[failed_at]))] = attempt
        return False

    def _first_failure(self, batch: Sequence[dict[str, Any]], result: Any) -> int:
        """Index of the first record the handler reported as failed (-1: none)."""
        if not self._route.event.report_failures or not isinstance(result, dict):
            return -1
        failures = result.get("batchItemFailures") or []
        if not failures:
            return -1
        reported = {str(f.get("itemIdentifier")) for f in failures}
        for index, record in enumerate(batch):
            if str(record["dynamodb"]["SequenceNumber"]) in reported:
                return index
        return 0  # an identifier that is not in the batch: the whole batch failed

    def _give_up(self, shard_id: str, batch: Sequence[dict[str, Any]], attempts: int) -> None:
        log.error(
            "%s: giving up on %d records after %d attempts; described in %s",
            self._name,
            len(batch),
            attempts,
            self._route.dead_letter_url.rsplit("/", 1)[-1],
        )
        body = {
            "requestContext": {
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": attempts,
            },
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": batch[0]["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": batch[-1]["dynamodb"]["SequenceNumber"],
                "batchSize": len(batch),
                "streamArn": self._route.stream_arn,
            },
        }
        self._clients.sqs.send_message(
            QueueUrl=self._route.dead_letter_url, MessageBody=json.dumps(body)
        )

"""Noticing a restarted local store and re-attaching to it.

The store keeps the journal, payloads and secrets across restarts (``durable_store``), but not
EventBridge buses and rules or SQS queues: the worker provisions those. A worker attached to a
store that restarted would otherwise find its queues gone (``NonExistentQueue``) and its Api
answer 502 until someone restarted the worker too. :class:`StoreWatch` probes the store about
once a second; when the store does not answer it backs off (up to ``MAX_BACKOFF`` seconds)
and, once the store answers without the worker's resources, provisions them again. Consumers
keep their queue URLs: a queue's URL is derived from its name and the store's address, both
unchanged. A store started again with another session key (``store_key``) refuses the worker
(403): the watch says so once, since only restarting the worker (or the store with the old key)
mends that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from durable_agents_local.provision import RuleQueue

log = logging.getLogger("durable_agents_local")

PROBE_SECONDS = 1.0
MAX_BACKOFF = 5.0
_MISSING = frozenset(
    {
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "ResourceNotFoundException",
        "ResourceNotFound",
    }
)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class StoreWatch:
    """Re-provisions what the worker needs whenever the store lost it (see the module).

    Args:
        probe: Raises ``ClientError`` (a missing resource) or ``BotoCoreError`` (no answer)
            unless the store still holds the worker's resources.
        reprovision: Provisions them again (idempotent).
        stop: Set to stop watching.
        interval: Seconds between probes while all is well.
        revive: Called when the store does not answer: starts it again if this worker
            started it and it died (returns whether it did).
    """

    def __init__(
        self,
        probe: Callable[[], Any],
        reprovision: Callable[[], Any],
        stop: threading.Event,
        interval: float = PROBE_SECONDS,
        revive: Callable[[], bool] | None = None,
    ):
        self._probe = probe
        self._reprovision = reprovision
        self._revive = revive
        self._stop = stop
        self._interval = interval
        self.reattached = 0
        self.refused = False
        self._thread = threading.Thread(target=self._run, name="store-watch", daemon=True)

    def start(self) -> None:
        """Starts the watch thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the thread to end (after ``stop`` is set)."""
        self._thread.join(timeout)

    def check(self) -> bool:
        """One probe, and a re-attachment if the store lost the resources.

        Returns:
            True if the store answered (re-attached, refused or not), False if it did not.

        Raises:
            ClientError: If the probe fails for another reason than a missing resource or a
                refused key, or provisioning again fails.
        """
        try:
            self._probe()
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 403:
                if not self.refused:
                    log.warning(
                        "the local store refuses this worker's session key (was it started "
                        "again with a new key?): restart this worker, or start the store with "
                        "DURABLE_AGENTS_STORE_KEY set to the key it had"
                    )
                self.refused = True
                return True
            if _code(exc) not in _MISSING:
                raise
            log.warning("the local store restarted without this worker's queues: re-attaching")
            self._reprovision()
            self.reattached += 1
            log.warning("re-attached to the restarted local store")
        except BotoCoreError:
            if self._revive is not None and self._revive():
                log.warning("the local store this worker started had died: started it again")
            return False
        self.refused = False
        return True

    def _run(self) -> None:
        wait = self._interval
        down = False
        while not self._stop.wait(wait):
            try:
                answered = self.check()
            except (BotoCoreError, ClientError, OSError, RuntimeError) as exc:
                log.warning("re-attaching to the local store failed: %s; trying again", exc)
                answered = False
            if answered:
                if down:
                    log.warning("the local store answers again")
                down, wait = False, self._interval
            else:
                if not down:
                    log.warning("the local store does not answer; waiting for it to come back")
                down, wait = True, min(MAX_BACKOFF, wait * 2)


def store_watch(
    clients: Any,
    queues: Sequence[RuleQueue],
    reprovision: Callable[[], Any],
    stop: threading.Event,
    revive: Callable[[], bool] | None = None,
) -> list[StoreWatch]:
    """The watch of a worker whose rules deliver through ``queues`` (none without a queue).

    Args:
        clients: Has an ``sqs`` client for the store.
        queues: The provisioned rule queues; the first one is probed.
        reprovision: Provisions the worker's resources again.
        stop: The worker's stop event.
        revive: Restarts the store if the worker started it and it died.
    """
    if not queues:
        return []
    url = queues[0].queue_url

    def probe() -> Any:
        return clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])

    return [StoreWatch(probe, reprovision, stop, revive=revive)]

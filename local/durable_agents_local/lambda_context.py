"""A Lambda context object for handlers invoked by the local worker."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

LOCAL_ACCOUNT_ID = "123456789012"


@dataclass
class LocalLambdaContext:
    """What Lambda passes as ``context``, with the remaining time counting down for real.

    The StepRunner derives its claim lease from ``get_remaining_time_in_millis()``, so a short
    ``timeout_seconds`` makes the lease of a killed worker's step expire quickly.

    Attributes:
        function_name: The function's logical id in ``template.yaml``.
        timeout_seconds: The function's timeout; the remaining time starts from it.
        memory_limit_in_mb: The function's MemorySize.
        invoked_function_arn: A local ARN for the function.
        aws_request_id: A fresh id per invocation.
        function_version: Always ``$LATEST`` locally.
        log_group_name: A local log group name (nothing is written there).
        log_stream_name: A local log stream name.
    """

    function_name: str
    timeout_seconds: float
    memory_limit_in_mb: int = 128
    invoked_function_arn: str = ""
    aws_request_id: str = field(default_factory=lambda: secrets.token_hex(16))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds
        if not self.log_group_name:
            self.log_group_name = f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Returns the milliseconds left before this invocation's timeout (never negative)."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def new_context(
    function_name: str, timeout_seconds: float, memory_mb: int, region: str
) -> LocalLambdaContext:
    """Makes the context for one invocation; its clock starts now.

    Args:
        function_name: The function's logical id.
        timeout_seconds: The function's timeout.
        memory_mb: The function's MemorySize.
        region: The local region (part of the ARN).

    Returns:
        A fresh context.
    """
    arn = f"arn:aws:lambda:{region}:{LOCAL_ACCOUNT_ID}:function:{function_name}"
    return LocalLambdaContext(
        function_name=function_name,
        timeout_seconds=timeout_seconds,
        memory_limit_in_mb=memory_mb,
        invoked_function_arn=arn,
    )

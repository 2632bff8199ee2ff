"""Who calls the local Api: the IAM caller every local request carries.

On AWS, API Gateway checks each request's SigV4 signature and puts the caller's ARN in
``requestContext.identity.userArn``; the Api's own checks (approvers, link minters, review
operators) then decide what that caller may do. Locally nothing is signed: every request's
caller is ``--caller-arn`` (``LOCAL_CALLER_ARN`` by default), or the ARN its
``X-Local-Caller-Arn`` header names, and the same checks apply to it.
"""

from __future__ import annotations

from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID

LOCAL_CALLER_ARN = f"arn:aws:iam::{LOCAL_ACCOUNT_ID}:user/local"
"""The IAM caller of every local request, unless ``--caller-arn`` or the header says otherwise."""
CALLER_HEADER = "X-Local-Caller-Arn"
"""The request header naming another IAM caller for one request."""


def check_caller_arn(text: str) -> str:
    """Accepts an IAM ARN (``arn:<partition>:<service>:<region>:<account>:<resource>``).

    Raises:
        ValueError: If ``text`` is not shaped like an ARN.
    """
    if not text.startswith("arn:") or len(text.split(":", 5)) < 6 or not text.split(":", 5)[5]:
        raise ValueError(f"expected an IAM ARN (arn:aws:iam::ACCOUNT:user/NAME), got {text!r}")
    return text

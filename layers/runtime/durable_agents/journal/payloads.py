"""Large payloads: spilled values are stored in S3 with their hash in the journal.

DynamoDB items stop at 400 KB; long transcripts and screenshots reach that first. A value over
``INLINE_LIMIT_BYTES`` — or one of the largest values of an item that would otherwise exceed its
budget (see ``item_size``) — is written to S3 under a content-addressed key and the journal keeps
``{bucket, key, sha256, size}``; reading verifies the hash.
"""

from __future__ import annotations

import hashlib
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient
from durable_agents.errors import PayloadError

INLINE_LIMIT_BYTES = 350_000


class S3PayloadStore:
    """Stores oversized journal values in S3.

    Args:
        client: A boto3 ``s3`` client.
        bucket: The payload bucket.
        prefix: Key prefix (the template grants access to ``runs/*`` only).
    """

    def __init__(self, client: Any, bucket: str, prefix: str = "runs/"):
        self._client = client if isinstance(client, GuardedClient) else GuardedClient(client)
        self._bucket = bucket
        self._prefix = prefix

    def put(self, run_id: str, text: str) -> dict[str, Any]:
        """Stores ``text`` and returns the reference kept in the journal."""
        body = text.encode()
        digest = hashlib.sha256(body).hexdigest()
        key = f"{self._prefix}{run_id}/{digest}.json"
        self._client.put_object(
            Bucket=self._bucket, Key=key, Body=body, ContentType="application/json"
        )
        return {"bucket": self._bucket, "key": key, "sha256": digest, "size": len(body)}

    def tag_run(self, run_id: str, tags: dict[str, str]) -> int:
        """Tags every object of a run (its prefix) with ``tags``; returns how many were tagged.

        Objects that already carry exactly these tags are left alone (a repeated pass writes
        nothing); S3 lifecycle rules expire objects by tag (``durable_agents.journal.retention``).
        """
        wanted = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        tagged = 0
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": f"{self._prefix}{run_id}/"}
        while True:
            page = self._client.list_objects_v2(**kwargs)
            for obj in page.get("Contents", []):
                current = self._client.get_object_tagging(Bucket=self._bucket, Key=obj["Key"])
                if sorted(current.get("TagSet", []), key=lambda t: t["Key"]) == wanted:
                    continue
                self._client.put_object_tagging(
                    Bucket=self._bucket, Key=obj["Key"], Tagging={"TagSet": wanted}
                )
                tagged += 1
            if not page.get("IsTruncated"):
                return tagged
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def get(self, ref: dict[str, Any]) -> str:
        """Reads a stored value back and verifies its hash.

        Raises:
            PayloadError: If the object is missing or its content does not match the hash.
        """
        try:
            body = self._client.get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
        except ClientError as exc:  # NoSuchKey and the like; throttling is InfrastructureError
            raise PayloadError(f"cannot read spilled payload {ref['key']!r}: {exc}") from exc
        if hashlib.sha256(body).hexdigest() != ref["sha256"]:
            raise PayloadError(f"spilled payload {ref['key']!r} does not match its hash")
        return str(body.decode())

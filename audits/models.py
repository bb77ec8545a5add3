"""The scheduled audits' own state: the chain verification's per-run cursor, and the heartbeats of workers
and beat. The operator trail is the `trail` app's; findings and recovery audits are the `recovery` app's (the
gate reads them).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from journals.models import EMPTY_PREFIX_DIGEST, Run


class ChainCursor(models.Model):
    """How far the chain verification has re-read a run, and what it needs to continue from there.

    ``state`` holds the per-branch continuation (next lsn, last digest, and the digests of fork records
    that start later branches) so that a pass reads only the records after ``verified_seq``.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="chain_cursor")
    verified_seq = models.BigIntegerField(default=0)
    # sha256 chained over the stored record digests through verified_seq, as ingest computed it.
    prefix_digest = models.CharField(max_length=64, default=EMPTY_PREFIX_DIGEST)
    state = models.JSONField(default=dict)
    verified_at = models.DateTimeField(null=True, blank=True)
    # When a pass last started over from seq 1 (the round-robin full re-read catches damage to records
    # that an incremental pass has already gone past).
    full_pass_at = models.DateTimeField(null=True, blank=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.run_id} verified through seq {self.verified_seq}"


HEARTBEAT_ROLES = ("worker", "beat")


class Heartbeat(models.Model):
    """The last sign of life of one worker or beat process, keyed by its node name."""

    name = models.CharField(max_length=200, unique=True)
    role = models.CharField(max_length=16, choices=[(r, r) for r in HEARTBEAT_ROLES])
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)
    # A few facts worth showing beside the time (e.g. the worker's concurrency, beat's scheduler).
    detail = models.JSONField(default=dict)

    class Meta:
        ordering = ["role", "name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(role__in=HEARTBEAT_ROLES), name="heartbeat_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.role} {self.name} @ {self.last_seen:%Y-%m-%d %H:%M:%S}"

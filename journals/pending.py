"""The assessment queue's state in the database: at most one pending assessment per run.

A model module of the `journals` app (imported by journals/models.py): the flag says the run's committed
prefix moved and its assessment is owed. The broker carries messages; this row is the truth about what is
owed. Ingest raises ``pending`` in the same transaction that stores a batch (compare-and-set: only the
batch that flips it announces ``prefix_moved`` on commit, and recovery publishes a task), the task lowers
it before it reads the prefix and holds a lease on it while it runs, and the sweep (audits/checks.py)
republishes a flag left raised with no message behind it, or a lease that ran out (its worker died).
journals/assessment_flag.py holds every write of it. The table keeps its name from the recovery app.
"""

from __future__ import annotations

from django.db import models

from journals.models import Run

OUTCOMES = ("stored", "unchanged", "superseded", "missing")


class PendingAssessment(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="pending_assessment")
    pending = models.BooleanField(default=False)
    # When the flag was last raised, and the run's last seq then (the sweep's age and the finding's facts).
    requested_at = models.DateTimeField(null=True, blank=True)
    requested_seq = models.BigIntegerField(default=0)
    # When a message was last handed to the broker (after commit); older than requested_at while the flag
    # is raised means the enqueue never happened (a crash between commit and publish).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    enqueues = models.BigIntegerField(default=0)
    # The latest task run: when it lowered the flag, when it finished and what it did.
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, blank=True, default="")
    # The task that lowered the flag holds it until this deadline, renewed while it runs and never past its
    # hard time limit; cleared when it finishes. A deadline in the past means the task is gone (its worker
    # was killed, its message lost with the broker), and the sweep asks for the assessment again.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Who holds the lease: the task's id, so that the broker's redelivery of the same message takes over.
    lease_holder = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(outcome__in=("", *OUTCOMES)), name="pendingassessment_outcome_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["pending", "requested_at"], name="pendingassessment_sweep"),
            models.Index(fields=["lease_expires_at"], name="pendingassessment_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {'pending' if self.pending else 'idle'}"

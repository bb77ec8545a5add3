"""Webhooks (configured by admins) and their deliveries (what was sent, how often, and how it went).

A delivery row is the unit of work and of truth: its body is fixed when the event happens (so every
attempt and every resend sends the same bytes, the same signature and the same idempotency key), and its
``status`` moves only by compare-and-set updates (notifications.delivery), so two workers that get the
same task (acks_late redelivery, the sweep) never both send it.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .destinations import DestinationRefused, destination_check_at_save

EVENTS = ("turn.blocked", "finding.opened", "crash_loop.parked", "package.rejected")
# What a team's channel is sent (notifications.notices): a hold's first message, its escalation, its end,
# a rule's daily digest, and an operator's test of the channel.
NOTICE_EVENTS = ("notice.trigger", "notice.escalate", "notice.resolve", "notice.digest", "notice.test")
DELIVERY_STATUSES = ("pending", "delivering", "delivered", "failed")
CHANNEL_KINDS = ("email", "chat", "page")
RULE_MODES = ("immediate", "escalate", "digest")


def _event_choices() -> list[tuple[str, str]]:
    return [(e, e.replace(".", " ").replace("_", " ")) for e in (*EVENTS, *NOTICE_EVENTS)]


class Webhook(models.Model):
    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(max_length=2000, help_text="Receives a POST with a JSON body for each subscribed event.")
    # Needed in clear to sign (HMAC) every delivery, so it cannot be hashed; it is write-only everywhere
    # it is edited (admin form, API) and never listed, logged or put in a payload.
    secret = models.CharField(max_length=200, help_text="Signs each delivery. Write-only: never shown again.")
    events = models.JSONField(default=list, help_text="Subscribed events.")
    active = models.BooleanField(default=True)
    # A team's webhook receives the events of that team's runs only (its run-id prefixes); events about no
    # run go to webhooks of no team. No team: every event (docs/access.md).
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="webhooks",
        help_text="Only the events of this team's runs. Blank: every event.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A URL that reaches inside (loopback, private, link-local...) is refused when it is saved, as at
        every delivery (notifications.destinations)."""
        try:
            destination_check_at_save(self.url)
        except DestinationRefused as err:
            raise ValidationError({"url": ValidationError(err.detail, code=err.code)}) from None

    def subscribes(self, event: str) -> bool:
        return self.active and isinstance(self.events, list) and event in self.events


class WebhookDelivery(models.Model):
    """One message to one destination: a webhook's event, or a team channel's notice (exactly one of the
    two). Both go through the same claim, retries, attempt rows and log."""

    webhook = models.ForeignKey(Webhook, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(
        "notifications.TeamChannel", null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.CharField(max_length=32, choices=_event_choices())
    # Sent as `Idempotency-Key`: the same event never makes two deliveries to one webhook, and a receiver
    # that sees a key twice (a retry after a lost response, a resend) knows it is the same event.
    idempotency_key = models.CharField(max_length=120)
    body = models.TextField(help_text="The exact JSON sent (redacted when it was made).")
    # The run the event is about (null: none), so that people see the deliveries of their teams' runs only.
    run_ident = models.CharField(max_length=200, null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=[(s, s) for s in DELIVERY_STATUSES], default="pending", db_index=True
    )
    attempts = models.IntegerField(default=0)
    # Attempts allowed before giving up; a resend raises it by the configured maximum.
    attempt_limit = models.IntegerField(default=8)
    next_attempt_at = models.DateTimeField(default=timezone.now, db_index=True)
    # While `delivering`: the claim's end. A worker that died mid-request leaves a claim that expires.
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    request_id = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["webhook", "idempotency_key"], name="webhookdelivery_unique_key"),
            models.UniqueConstraint(fields=["channel", "idempotency_key"], name="webhookdelivery_unique_channel_key"),
            models.CheckConstraint(
                condition=Q(webhook__isnull=False, channel__isnull=True)
                | Q(webhook__isnull=True, channel__isnull=False),
                name="webhookdelivery_one_destination",
            ),
            models.CheckConstraint(condition=Q(status__in=DELIVERY_STATUSES), name="webhookdelivery_status_valid"),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="webhookdelivery_attempts_gte_0"),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhookdelivery_due")]

    def __str__(self) -> str:
        return f"{self.event} → {self.webhook_id or f'channel {self.channel_id}'} ({self.status})"


class WebhookAttempt(models.Model):
    """One HTTP attempt of a delivery: when, how long, and what came back (never the response body)."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.FloatField(default=0)
    status_code = models.IntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhookattempt_unique_number"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}"


class TeamChannel(models.Model):
    """Where a team is told about its held turns: an email address list, a Slack-compatible chat webhook,
    or a PagerDuty Events API v2 integration."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="notification_channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=8, choices=[(k, k) for k in CHANNEL_KINDS])
    # email: addresses separated by commas; chat: the incoming-webhook URL; page: the Events API URL.
    target = models.CharField(max_length=2000)
    # chat: signs each message (X-LoopX-Signature) when set; page: the integration's routing key. Needed in
    # clear to send, so it cannot be hashed; write-only wherever it is edited, never shown, logged or stored
    # in a delivery's body (the routing key is put in only as the request leaves).
    secret = models.CharField(max_length=200, blank=True, default="")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="teamchannel_unique_name"),
            models.CheckConstraint(condition=Q(kind__in=CHANNEL_KINDS), name="teamchannel_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class NotificationRule(models.Model):
    """When a team is told: held turns of its runs in ``states`` (blank: any held state), for ``reasons``
    (blank: any), of runs starting with ``run_prefix``, once they have waited ``threshold_minutes``; by
    ``mode``: immediate (at once, escalated past the threshold), escalate (once past the threshold) or
    digest (one message a day)."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="notification_rules")
    name = models.CharField(max_length=100)
    states = models.JSONField(default=list, blank=True)
    reasons = models.JSONField(default=list, blank=True)
    run_prefix = models.CharField(max_length=200, blank=True, default="")
    threshold_minutes = models.PositiveIntegerField(default=0)
    mode = models.CharField(max_length=10, choices=[(m, m) for m in RULE_MODES], default="immediate")
    # Blank: every active channel of the team.
    channels = models.ManyToManyField(TeamChannel, blank=True, related_name="rules")
    active = models.BooleanField(default=True)
    last_digest_on = models.DateField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="notificationrule_unique_name"),
            models.CheckConstraint(condition=Q(mode__in=RULE_MODES), name="notificationrule_mode_valid"),
        ]

    def __str__(self) -> str:
        return self.name


class TurnHold(models.Model):
    """One hold of one turn: from the moment the gate held it until it let it go. Its ``dedup_key`` names
    the hold in every message (PagerDuty's incident key), the same for every rule and channel."""

    turn = models.ForeignKey("journals.Turn", on_delete=models.CASCADE, related_name="+")
    run_ident = models.CharField(max_length=200)
    turn_ident = models.CharField(max_length=200)
    dedup_key = models.CharField(max_length=80, unique=True)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["turn"], condition=Q(ended_at__isnull=True), name="turnhold_one_open_per_turn"
            ),
        ]

    def __str__(self) -> str:
        return self.dedup_key


class HoldNotice(models.Model):
    """What one rule has said about one hold: one first message, one escalation, one resolve at most."""

    hold = models.ForeignKey(TurnHold, on_delete=models.CASCADE, related_name="notices")
    rule = models.ForeignKey(NotificationRule, on_delete=models.CASCADE, related_name="notices")
    opened_at = models.DateTimeField(default=timezone.now)
    triggered_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["hold", "rule"], name="holdnotice_unique")]

    def __str__(self) -> str:
        return f"rule {self.rule_id} on {self.hold_id}"

"""Roles on every verb: every API operation (from the OpenAPI schema) and every console URL, sent by each
persona with a body that passes validation, gets the answer docs/access.md promises.

The personas: ``V`` a viewer, ``O`` an operator and ``A`` an admin (these see every run), ``T`` a runtime
token (empty prefix), ``X`` the red team's operator acting on the blue team's objects, ``N`` an operator in
no team, and ``R`` a runtime token of prefix ``red-`` acting on the blue team's objects. What each answer
must be:

- ``o``: allowed (2xx; or a conflict with the object's state, the role and the run having passed),
- ``r``: refused for the role (401 or 403),
- ``m``: 404, and exactly the answer of the same request about an object that does not exist,
- ``f``: 403 ``run_forbidden`` for a token outside its prefix, exactly the answer about a missing run,
- ``s``: exactly the answer of the same request naming missing objects, and not a refusal (a list, a
  search or a bulk decision filtered by another team's run tells nothing about it).

The bodies are plausible (the operator's own answers show they pass validation), so that the access check,
not validation, is what refuses. No answer is a 5xx, and the outsiders (``X``, ``N``, ``R``) change or create
no row of the blue team (snapshots before and after).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from journals.models import JournalRecord, Run, Turn
from notifications.models import NotificationRule, TeamChannel, Webhook, WebhookDelivery
from recovery.findings.models import Finding
from recovery.imports.models import HistoryImport, ImportedRun
from recovery.models import Assessment, GateDecision, OperatorEvidence, TurnClaim
from recovery.packages.models import PackageUpload
from recovery.packages.services import run_journal_bytes
from recovery.recovery_audits.models import RecoveryAudit
from tests.api.test_teams import BLUE_RUN, blue, red  # noqa: F401 - the two teams' fixtures
from tests.imports.charge_history import history_bytes
from tests.personas import make_runtime

pytestmark = pytest.mark.django_db

PERSONAS = "VOATXNR"
MISSING_UUID = uuid.UUID("00000000-0000-4000-8000-000000000000")


@dataclass
class Ctx:
    """The ids a request names: the blue team's objects, or (``missing``) ones that do not exist."""

    run_id: str
    imported_run_id: str
    turn_id: str
    run_pk: int
    turn_pk: int
    finding: int
    upload: uuid.UUID
    imported: uuid.UUID
    imported_run: int
    audit: int
    assessment: int
    delivery: int
    fencing: int
    first_record: bytes
    admin_name: str
    webhook: int
    token: int
    schedule: int
    team: int
    channel: int
    rule: int
    spare_channel: int
    spare_rule: int


Call = Callable[[Any, Ctx, str], Any]  # (client, ids, persona) -> answer


def _post(path: Callable[[Ctx], str], body: Callable[[Ctx], Any] | None = None) -> Call:
    return lambda c, x, p: c.post(path(x), body(x) if body else {}, format="json")


def _get(path: Callable[[Ctx], str]) -> Call:
    return lambda c, x, p: c.get(path(x))


def _turn(x: Ctx, tail: str = "") -> str:
    return f"/api/v1/runs/{x.run_id}/turns/{x.turn_id}{tail}"


def _history(x: Ctx, p: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(f"{p}.json", history_bytes(run_id=f"roles-{p}"), content_type="application/json")


def _ingest(c: Any, x: Ctx, p: str) -> Any:
    # A redelivery of the run's first record: plausible, and it stores nothing new.
    return c.post(f"/api/v1/runs/{x.run_id}/records", x.first_record, content_type="application/x-ndjson")


# The API's operations (operationId): how each is called, and the answer of each persona (V O A T X N R).
API: dict[str, tuple[Call, str]] = {
    "audits_list": (_get(lambda x: f"/api/v1/audits?run={x.run_id}"), "oooosss"),
    "findings_list": (_get(lambda x: f"/api/v1/findings?run={x.run_id}"), "ooorssr"),
    "findings_retrieve": (_get(lambda x: f"/api/v1/findings/{x.finding}"), "ooormmr"),
    "findings_acknowledge": (_post(lambda x: f"/api/v1/findings/{x.finding}/acknowledge",
                                   lambda x: {"reason": "mine"}), "roormmr"),
    "findings_resolve": (_post(lambda x: f"/api/v1/findings/{x.finding}/resolve", lambda x: {"reason": "done"}),
                         "roormmr"),
    "imports_upload": (lambda c, x, p: c.post("/api/v1/imports", {
        "file": _history(x, p), "source": "temporal", "run": x.run_id}, format="multipart"), "rooommf"),
    "limits_retrieve": (_get(lambda x: "/api/v1/limits"), "ooooooo"),
    "imports_retrieve": (_get(lambda x: f"/api/v1/imports/{x.imported}"), "ooommmm"),
    "operator_actions_list": (_get(lambda x: f"/api/v1/operator-actions?run={x.run_id}"), "oooosss"),
    "operator_actions_export": (_get(lambda x: f"/api/v1/operator-actions/export?run={x.run_id}"), "roorssr"),
    "packages_upload": (lambda c, x, p: c.post("/api/v1/packages", b"bytes of a package",
                                               content_type="application/octet-stream"), "roooooo"),
    "packages_retrieve": (_get(lambda x: f"/api/v1/packages/{x.upload}"), "ooommmm"),
    "runs_list": (_get(lambda x: f"/api/v1/runs?q={x.run_id}"), "oooosss"),
    "runs_retrieve": (_get(lambda x: f"/api/v1/runs/{x.run_id}"), "oooommf"),
    "assessments_list": (_get(lambda x: f"/api/v1/runs/{x.run_id}/assessments"), "oooommf"),
    "assessments_refresh": (_post(lambda x: f"/api/v1/runs/{x.run_id}/assessments"), "rooommf"),
    "assessments_retrieve": (_get(lambda x: f"/api/v1/runs/{x.run_id}/assessments/{x.assessment}"), "oooommf"),
    "branches_list": (_get(lambda x: f"/api/v1/runs/{x.run_id}/branches"), "oooommf"),
    "run_export": (_get(lambda x: f"/api/v1/runs/{x.run_id}/export"), "roormmr"),
    "run_import": (_get(lambda x: f"/api/v1/runs/{x.imported_run_id}/import"), "oooommf"),
    "records_ingest": (_ingest, "rooommf"),
    "records_list": (_get(lambda x: f"/api/v1/runs/{x.run_id}/records"), "oooommf"),
    "repairs_apply": (_post(lambda x: f"/api/v1/runs/{x.run_id}/repairs", lambda x: {
        "kind": "accept_prefix", "through_seq": 3, "reason": "cut", "preview": "0" * 64}), "roormmr"),
    "repairs_list": (_get(lambda x: f"/api/v1/runs/{x.run_id}/repairs"), "ooormmr"),
    "repairs_preview": (_post(lambda x: f"/api/v1/runs/{x.run_id}/repairs/preview", lambda x: {
        "kind": "accept_prefix", "through_seq": 3, "reason": "cut"}), "roormmr"),
    "run_turns_list": (_get(lambda x: f"/api/v1/runs/{x.run_id}/turns"), "oooommf"),
    "turns_retrieve": (_get(lambda x: _turn(x)), "oooommf"),
    "turn_annotations_retrieve": (_get(lambda x: _turn(x, "/annotations")), "ooormmr"),
    "turn_annotations_update": (_post(lambda x: _turn(x, "/annotations"), lambda x: {
        "notes": "the disk was replaced", "reason": "context"}), "roormmr"),
    "turn_approve": (_post(lambda x: _turn(x, "/approve"), lambda x: {"reason": "looked at it"}), "roormmr"),
    "turn_assign": (_post(lambda x: _turn(x, "/assign"), lambda x: {
        "assignee": x.admin_name, "reason": "the lead knows this card"}), "roormmr"),
    "turn_block": (_post(lambda x: _turn(x, "/block"), lambda x: {"reason": "hold it"}), "roormmr"),
    "turn_claim": (_post(lambda x: _turn(x, "/claim"), lambda x: {"worker_id": "roles-worker"}), "rooommf"),
    "turn_decision": (_get(lambda x: _turn(x, "/decision")), "oooommf"),
    "turn_evidence_list": (_get(lambda x: _turn(x, "/evidence")), "oooommf"),
    "turn_gate_decisions_list": (_get(lambda x: _turn(x, "/gate-decisions")), "oooommf"),
    "turn_intent_classes": (_get(lambda x: _turn(x, "/intent-classes")), "oooommf"),
    "turn_intents_list": (_get(lambda x: _turn(x, "/intents")), "oooommf"),
    "turn_records_list": (_get(lambda x: _turn(x, "/records")), "oooommf"),
    "recovery_list": (_get(lambda x: _turn(x, "/recovery")), "oooommf"),
    "recovery_open": (_post(lambda x: _turn(x, "/recovery"), lambda x: {"fencing_token": x.fencing}), "rooommf"),
    "recovery_retrieve": (_get(lambda x: _turn(x, f"/recovery/{x.audit}")), "oooommf"),
    "recovery_action_report": (_post(lambda x: _turn(x, f"/recovery/{x.audit}/actions"), lambda x: {
        "fencing_token": x.fencing, "kind": "phase", "target": "dispatch"}), "rooommf"),
    "recovery_close": (_post(lambda x: _turn(x, f"/recovery/{x.audit}/close"),
                             lambda x: {"fencing_token": x.fencing}), "rooommf"),
    "turn_release": (_post(lambda x: _turn(x, "/release"), lambda x: {"fencing_token": x.fencing}), "rooommf"),
    "turn_unassign": (_post(lambda x: _turn(x, "/unassign")), "roormmr"),
    "schedules_list": (_get(lambda x: "/api/v1/schedules"), "rooroor"),
    "schedules_change": (lambda c, x, p: c.patch(f"/api/v1/schedules/{x.schedule}", {
        "enabled": True, "reason": "keep it on"}, format="json"), "rrorrrr"),
    "tokens_create": (_post(lambda x: "/api/v1/tokens", lambda x: {"name": f"roles-{uuid.uuid4().hex[:8]}"}),
                      "rrorrrr"),
    "tokens_list": (_get(lambda x: "/api/v1/tokens"), "rrorrrr"),
    "tokens_revoke": (_post(lambda x: f"/api/v1/tokens/{x.token}/revoke"), "rrorrrr"),
    "turns_list": (_get(lambda x: f"/api/v1/turns?run={x.run_id}"), "oooosss"),
    "turns_bulk": (_post(lambda x: "/api/v1/turns/bulk", lambda x: {
        "action": "block", "reason": "hold them all", "filter": {"run": x.run_id}}), "roorssr"),
    "v1_webhook_deliveries_list": (_get(lambda x: f"/api/v1/webhook-deliveries?webhook={x.webhook}"), "ooorssr"),
    "v1_webhook_deliveries_resend_create": (_post(lambda x: f"/api/v1/webhook-deliveries/{x.delivery}/resend"),
                                            "roormmr"),
    "v1_webhooks_create": (_post(lambda x: "/api/v1/webhooks", lambda x: {
        "name": f"roles-{uuid.uuid4().hex[:8]}", "url": "https://hooks.example.invalid/h", "secret": "t" * 20,
        "events": []}), "rrorrrr"),
    "v1_webhooks_list": (_get(lambda x: "/api/v1/webhooks"), "rrorrrr"),
    "v1_webhooks_retrieve": (_get(lambda x: f"/api/v1/webhooks/{x.webhook}"), "rrorrrr"),
    "v1_webhooks_update": (lambda c, x, p: c.put(f"/api/v1/webhooks/{x.webhook}", {
        "name": "blue-hook", "url": "https://hooks.example.invalid/u", "events": ["turn.blocked"],
        "active": True}, format="json"), "rrorrrr"),
    "v1_webhooks_partial_update": (lambda c, x, p: c.patch(f"/api/v1/webhooks/{x.webhook}", {"active": True},
                                                           format="json"), "rrorrrr"),
    "v1_webhooks_destroy": (lambda c, x, p: c.delete(f"/api/v1/webhooks/{x.webhook}"), "rrorrrr"),
    # A team's notification channels and rules: only its members (and admins) see them; the runtime tokens
    # have no session. The blue team's are nobody's here but the admin's (V and O belong to all-runs).
    "v1_notification_channels_list": (_get(lambda x: "/api/v1/notification-channels"), "oooroor"),
    "v1_notification_channels_create": (_post(lambda x: "/api/v1/notification-channels", lambda x: {
        "team": x.team, "name": f"roles-{uuid.uuid4().hex[:8]}", "kind": "email", "target": "a@example.test"}),
        "rsorssr"),
    "v1_notification_channels_retrieve": (_get(lambda x: f"/api/v1/notification-channels/{x.channel}"), "mmormmr"),
    "v1_notification_channels_update": (lambda c, x, p: c.put(f"/api/v1/notification-channels/{x.channel}", {
        "team": x.team, "name": "blue-mail", "kind": "email", "target": "b@example.test"}, format="json"),
        "rmormmr"),
    "v1_notification_channels_partial_update": (lambda c, x, p: c.patch(
        f"/api/v1/notification-channels/{x.channel}", {"active": True}, format="json"), "rmormmr"),
    "v1_notification_channels_destroy": (lambda c, x, p: c.delete(
        f"/api/v1/notification-channels/{x.spare_channel}"), "rmormmr"),
    "v1_notification_channels_test_create": (_post(lambda x: f"/api/v1/notification-channels/{x.channel}/test"),
                                             "rmormmr"),
    "v1_notification_rules_list": (_get(lambda x: "/api/v1/notification-rules"), "oooroor"),
    "v1_notification_rules_create": (_post(lambda x: "/api/v1/notification-rules", lambda x: {
        "team": x.team, "name": f"roles-{uuid.uuid4().hex[:8]}", "mode": "digest"}), "rsorssr"),
    "v1_notification_rules_retrieve": (_get(lambda x: f"/api/v1/notification-rules/{x.rule}"), "mmormmr"),
    "v1_notification_rules_update": (lambda c, x, p: c.put(f"/api/v1/notification-rules/{x.rule}", {
        "team": x.team, "name": "blue-rule", "mode": "digest"}, format="json"), "rmormmr"),
    "v1_notification_rules_partial_update": (lambda c, x, p: c.patch(
        f"/api/v1/notification-rules/{x.rule}", {"threshold_minutes": 5}, format="json"), "rmormmr"),
    "v1_notification_rules_destroy": (lambda c, x, p: c.delete(f"/api/v1/notification-rules/{x.spare_rule}"),
                                      "rmormmr"),
}


def _page(method: str, path: Callable[[Ctx], str], data: Callable[[Ctx], dict[str, Any]] | None = None) -> Call:
    if method == "get":
        return lambda c, x, p: c.get(path(x))
    return lambda c, x, p: c.post(path(x), data(x) if data else {})


# The console's URLs (by name): how each is called, and the answer of each persona (V O A X N; a runtime
# token has no session, so the console sends it to sign in like anyone unknown).
CONSOLE: dict[str, tuple[Call, str]] = {
    "console:overview": (_page("get", lambda x: "/"), "ooooo"),
    "console:blocked_queue": (_page("get", lambda x: "/queue/blocked/"), "ooooo"),
    "console:runs": (_page("get", lambda x: f"/runs/?q={x.run_id}"), "oooss"),
    "console:run": (_page("get", lambda x: f"/runs/{x.run_pk}/"), "ooomm"),
    "console:records": (_page("get", lambda x: f"/runs/{x.run_pk}/records/"), "ooomm"),
    "console:record": (_page("get", lambda x: f"/runs/{x.run_pk}/records/0/0/"), "ooomm"),
    "console:turns": (_page("get", lambda x: f"/turns/?run={x.run_id}"), "oooss"),
    "console:bulk": (_page("post", lambda x: "/turns/bulk/", lambda x: {
        "run": x.run_id, "action": "block", "reason": "hold them all", "expected": "1"}), "rooss"),
    "console:turn": (_page("get", lambda x: f"/turns/{x.turn_pk}/"), "ooomm"),
    "console:approve": (_page("post", lambda x: f"/turns/{x.turn_pk}/approve/", lambda x: {"reason": "looked"}),
                        "roomm"),
    "console:block": (_page("post", lambda x: f"/turns/{x.turn_pk}/block/", lambda x: {"reason": "hold"}), "roomm"),
    "console:assign": (_page("post", lambda x: f"/turns/{x.turn_pk}/assign/", lambda x: {
        "assignee": x.admin_name, "reason": "handing over"}), "roomm"),
    "console:unassign": (_page("post", lambda x: f"/turns/{x.turn_pk}/unassign/"), "roomm"),
    "console:inbox_count": (_page("get", lambda x: "/inbox/count/"), "ooooo"),
    "console:findings": (_page("get", lambda x: f"/findings/?state=all&id={x.finding}"), "oooss"),
    "console:finding_acknowledge": (_page("post", lambda x: f"/findings/{x.finding}/acknowledge/",
                                          lambda x: {"reason": "mine"}), "roomm"),
    "console:finding_resolve": (_page("post", lambda x: f"/findings/{x.finding}/resolve/",
                                      lambda x: {"reason": "done"}), "roomm"),
    "console:packages": (_page("get", lambda x: "/packages/"), "ooooo"),
    "console:run_export": (_page("get", lambda x: f"/runs/{x.run_pk}/export/"), "roomm"),
    "console:package_upload": (lambda c, x, p: c.post("/packages/upload/", {
        "package": SimpleUploadedFile("p.tar.gz", b"bytes of a package")}), "roooo"),
    "console:package": (_page("get", lambda x: f"/packages/{x.upload}/"), "ooomm"),
    "console:package_status": (_page("get", lambda x: f"/packages/{x.upload}/status/"), "ooomm"),
    "console:package_requeue": (_page("post", lambda x: f"/packages/{x.upload}/requeue/"), "roomm"),
    "console:run_repair": (_page("post", lambda x: f"/runs/{x.run_pk}/repair/", lambda x: {
        "kind": "accept_prefix", "through_seq": 3, "reason": "cut", "preview": "0" * 64}), "roomm"),
    "console:trail": (_page("get", lambda x: f"/trail/?run={x.run_id}"), "oooss"),
    "console:trail_export": (_page("get", lambda x: f"/trail/export/?format=jsonl&run={x.run_id}"), "rooss"),
    "console:imports": (_page("get", lambda x: "/imports/"), "ooooo"),
    "console:import_upload": (lambda c, x, p: c.post("/imports/upload/", {
        "file": _history(x, p), "source": "temporal", "run": x.run_id}), "rooss"),
    "console:import": (_page("get", lambda x: f"/imports/{x.imported}/"), "ooomm"),
    "console:import_status": (_page("get", lambda x: f"/imports/{x.imported}/status/"), "ooomm"),
    "console:import_requeue": (_page("post", lambda x: f"/imports/{x.imported}/requeue/"), "roomm"),
    "console:effect_maps": (_page("get", lambda x: "/effect-maps/"), "ooooo"),
    "console:effect_map_new": (_page("post", lambda x: "/effect-maps/new/", lambda x: {
        "name": f"roles-{uuid.uuid4().hex[:8]}", "entries": "LookupOrder = safe", "default": "unsafe",
        "reason": "a map of our own"}), "roooo"),
    "console:effect_map_propose": (_page("post", lambda x: "/effect-maps/propose/", lambda x: {
        "imported_run": x.imported_run, "name": "ChargeCard"}), "roomm"),
    "console:effect_map": (_page("get", lambda x: "/effect-maps/shared/"), "ooooo"),
    "console:effect_map_save": (_page("post", lambda x: "/effect-maps/shared/save/", lambda x: {
        "entries": f"Lookup{uuid.uuid4().hex[:6]} = safe", "default": "unsafe", "reason": "reads only"}), "roooo"),
    "console:effect_map_attach": (_page("post", lambda x: "/effect-maps/shared/attach/", lambda x: {
        "system": "temporal", "key": "*", "reason": "every namespace"}), "roooo"),
    "console:preferences": (_page("get", lambda x: "/preferences/"), "ooooo"),
    "console:saved_view_create": (_page("post", lambda x: "/saved-views/", lambda x: {
        "name": "mine", "page": "turns", "query": f"run={x.run_id}"}), "ooooo"),
    # A team's notification pages (V and O are not of the blue team: its pages are a 404 to them).
    "notices:teams": (_page("get", lambda x: "/notifications/"), "ooooo"),
    "notices:team": (_page("get", lambda x: f"/notifications/teams/{x.team}/"), "mmomm"),
    "notices:channel_new": (_page("post", lambda x: f"/notifications/teams/{x.team}/channels/new/", lambda x: {
        "name": f"roles-{uuid.uuid4().hex[:8]}", "kind": "email", "target": "c@example.test"}), "mmomm"),
    "notices:channel_edit": (_page("post", lambda x: f"/notifications/teams/{x.team}/channels/{x.channel}/",
                                   lambda x: {"name": "blue-mail", "kind": "email", "target": "d@example.test"}),
                             "mmomm"),
    "notices:channel_test": (_page("post", lambda x: f"/notifications/teams/{x.team}/channels/{x.channel}/test/"),
                             "mmomm"),
    "notices:rule_new": (_page("post", lambda x: f"/notifications/teams/{x.team}/rules/new/", lambda x: {
        "name": f"roles-{uuid.uuid4().hex[:8]}", "mode": "digest", "threshold_minutes": "0"}), "mmomm"),
    "notices:rule_edit": (_page("post", lambda x: f"/notifications/teams/{x.team}/rules/{x.rule}/", lambda x: {
        "name": "blue-rule", "mode": "digest", "threshold_minutes": "0"}), "mmomm"),
    "notices:rule_delete": (_page("post", lambda x: f"/notifications/teams/{x.team}/rules/{x.rule}/delete/"),
                            "mmomm"),
    "notices:channel_delete": (_page("post", lambda x: f"/notifications/teams/{x.team}/channels/{x.channel}/delete/"),
                               "mmomm"),
}
# URLs outside this walk, and why.
NOT_WALKED = {
    "console:saved_view_delete": "a person's own saved filter: another person's answers 404 "
    "(tests/console/test_saved_views.py)",
    "login": "Django's sign-in", "logout": "Django's sign-out", "password_change": "a person's own password",
    "password_change_done": "a person's own password", "password_reset": "Django's reset mail",
    "password_reset_done": "Django's reset mail", "password_reset_confirm": "Django's reset link",
    "password_reset_complete": "Django's reset", "oidc_authentication_init": "the company's sign-in",
    "oidc_authentication_callback": "the company's sign-in", "favicon": "a static file",
    "healthz": "health checks: no data (tests/ops/test_health.py)", "readyz": "health checks: no data",
    "metrics": "scraped with METRICS_TOKEN, never a person's session (tests/ops/test_metrics.py)",
}  # fmt: skip


@pytest.fixture
def world(blue: dict[str, Any], red: Any, blue_operator: Any, admin_user: Any,  # noqa: F811 - the fixtures above
          no_broker: list[str], eager_tasks: Any, django_capture_on_commit_callbacks: Any,
          monkeypatch: pytest.MonkeyPatch) -> dict[str, Ctx]:
    """The blue team's objects of every kind (tests/api/test_teams.py's, and an import, a webhook and its
    delivery, a token and a schedule), and the same ids pointing at nothing."""
    from django_celery_beat.models import PeriodicTask

    from notifications import delivery
    from notifications.tasks import deliver_webhook
    from recovery.imports.services import effect_map_create, history_upload_receive
    from trail.tokens import api_token_create

    monkeypatch.setattr(deliver_webhook, "apply_async", lambda *a, **k: None)  # deliveries stay pending
    effect_map_create(name="shared", entries={"SendReceipt": "idempotent"}, actor=blue_operator, reason="r")
    with django_capture_on_commit_callbacks(execute=True):
        imported, _ = history_upload_receive(
            file=SimpleUploadedFile("blue.json", history_bytes(run_id="blue-hist")), source="temporal",
            run="blue-imported", actor=blue_operator, effect_map="shared",
        )  # fmt: skip
    hook = Webhook.objects.create(name="blue-hook", url="https://hooks.example.invalid/h", secret="s" * 20,
                                  events=["turn.blocked"])  # fmt: skip
    delivery.enqueue("turn.blocked", ("roles", 1), {"run": BLUE_RUN})
    token, _ = api_token_create(name="to-revoke", actor_name="test")
    from teams.models import Team

    team = Team.objects.get(name="blue")
    channel, spare_channel = (
        TeamChannel.objects.create(team=team, name=n, kind="email", target="blue@example.test") for n in ("m", "s")
    )
    rule, spare_rule = (NotificationRule.objects.create(team=team, name=n, mode="digest") for n in ("r", "s"))
    notices = {"team": team.pk, "channel": channel.pk, "rule": rule.pk, "spare_channel": spare_channel.pk,
               "spare_rule": spare_rule.pk}
    run, turn = blue["run"], blue["turn"]
    claim = TurnClaim.objects.filter(turn=turn).latest("pk")
    first = run_journal_bytes(run=run).split(b"\n", 1)[0] + b"\n"
    common = {"first_record": first, "admin_name": admin_user.username, "webhook": hook.pk, "token": token.pk,
              "schedule": PeriodicTask.objects.order_by("pk").first().pk}  # fmt: skip
    owned = Ctx(
        run_id=run.run_id, imported_run_id="blue-imported", turn_id=turn.turn_id, run_pk=run.pk, turn_pk=turn.pk,
        finding=blue["finding"].pk, upload=blue["upload"].pk, imported=imported.pk,
        imported_run=ImportedRun.objects.get(history_import=imported).pk,
        audit=blue["audit"].pk, assessment=blue["assessment"].pk,
        delivery=WebhookDelivery.objects.get(run_ident=BLUE_RUN).pk, fencing=claim.fencing_token, **common,
        **notices,
    )  # fmt: skip
    missing = Ctx(
        run_id="blue-missing", imported_run_id="blue-missing", turn_id="t-missing", run_pk=999_999,
        turn_pk=999_999, finding=999_999, upload=MISSING_UUID, imported=MISSING_UUID, imported_run=999_999,
        audit=999_999, assessment=999_999, delivery=999_999, fencing=claim.fencing_token, **common,
        team=999_999, channel=999_999, rule=999_999, spare_channel=999_999, spare_rule=999_999,
    )  # fmt: skip
    return {"owned": owned, "missing": missing}


def _blue_rows() -> list[Any]:
    """Everything of the blue team's that an outsider's request might change or create."""
    blue_runs = Run.objects.filter(run_id__startswith="blue")
    turns = Turn.objects.filter(run__in=blue_runs)
    return [
        sorted(blue_runs.values_list("run_id", flat=True)),
        list(turns.order_by("pk").values_list("pk", "status", "updated_at")),
        JournalRecord.objects.filter(run__in=blue_runs).count(),
        Assessment.objects.filter(run__in=blue_runs).count(),
        list(GateDecision.objects.filter(turn__in=turns).values_list("pk", flat=True)),
        list(OperatorEvidence.objects.filter(turn__in=turns).values_list("pk", flat=True)),
        list(TurnClaim.objects.filter(turn__in=turns).order_by("pk").values_list("pk", "released_at")),
        list(RecoveryAudit.objects.filter(turn__in=turns).values_list("pk", flat=True)),
        list(Finding.objects.filter(run__in=blue_runs).order_by("pk").values_list("pk", "state")),
        list(PackageUpload.objects.filter(run_ident__startswith="blue").values_list("pk", "state", "enqueued_at")),
        list(HistoryImport.objects.order_by("pk").values_list("pk", "state", "generation")),
        list(ImportedRun.objects.order_by("pk").values_list("pk", "run_ident")),
        list(Webhook.objects.order_by("pk").values_list("pk", "url", "active")),
        list(WebhookDelivery.objects.filter(run_ident__startswith="blue").values_list("pk", "status", "attempt_limit")),
        list(WebhookDelivery.objects.filter(channel__team__name="blue").values_list("pk", flat=True)),
        list(TeamChannel.objects.filter(team__name="blue").order_by("pk").values_list("pk", "name", "target")),
        list(NotificationRule.objects.filter(team__name="blue").order_by("pk").values_list("pk", "name", "mode")),
    ]


def _answer(response: Any, ids: Ctx) -> tuple[int, bytes]:
    """The status and the body, less what differs between any two requests (the request's id, a page's
    CSRF token) and the ids a page shows back as what was searched for (a run id, a finding's number)."""
    body = b"".join(response.streaming_content) if response.streaming else response.content
    body = body.replace(ids.run_id.encode(), b"<run>")
    body = re.sub(rb"(id=|finding )%d\b" % ids.finding, rb"\1<finding>", body)
    body = re.sub(rb"[A-Za-z0-9]{64}", b"<csrf>", body)
    return response.status_code, re.sub(rb"[0-9a-f]{32}", b"<id>", body)


def _verdict(expected: str, client: Any, call: Call, world: dict[str, Ctx], persona: str) -> str | None:
    """None when the answer is the expected one, else what was wrong."""
    status, body = _answer(call(client, world["owned"], persona), world["owned"])
    if status >= 500:
        return f"{status}"
    if expected == "o":
        return None if status < 400 or status == 409 else f"{status} {body[:200]!r}"
    if expected == "r":
        return None if status in (401, 403) else f"{status}, not refused for the role"
    twin = _answer(call(client, world["missing"], persona), world["missing"])
    if expected == "m" and status != 404:
        return f"{status}, not 404 {body[:200]!r}"
    if expected == "f" and (status != 403 or b"run" not in body.lower()):
        return f"{status}, not 403 run_forbidden {body[:200]!r}"
    if expected == "s" and status in (401, 403, 404):
        return f"{status} {body[:200]!r}"
    if (status, body) != twin:
        return f"{status} {body[:120]!r} differs from the missing object's {twin[0]} {twin[1][:120]!r}"
    return None


def _clients(persona: str, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """(API client, console client) of a persona."""
    if persona in ("T", "R"):
        runtime = make_runtime(f"roles-{persona}", run_prefix="" if persona == "T" else "red-")
        return runtime.client, Client()
    user = request.getfixturevalue({"V": "viewer", "O": "operator", "A": "admin_user", "X": "red_operator",
                                    "N": "teamless_operator"}[persona])  # fmt: skip
    api, pages = APIClient(), Client()
    api.force_login(user)
    pages.force_login(user)
    return api, pages


def _walk(persona: str, world: dict[str, Ctx], request: pytest.FixtureRequest) -> dict[str, str]:
    api, pages = _clients(persona, request)
    wrong: dict[str, str] = {}
    # The admin-only removals last: the other operations still find the webhook and the token.
    for name in sorted(API, key=lambda n: (n in ("v1_webhooks_destroy", "tokens_revoke"), n)):
        call, expected = API[name]
        verdict = _verdict(expected[PERSONAS.index(persona)], api, call, world, persona)
        if verdict:
            wrong[name] = verdict
    if persona in ("T", "R"):
        return wrong
    for name, (call, expected) in CONSOLE.items():
        verdict = _verdict(expected["VOAXN".index(persona)], pages, call, world, persona)
        if verdict:
            wrong[name] = verdict
    return wrong


def test_each_persona_gets_the_documented_answer_on_every_route(world, request):
    """One world for all the personas (building it is most of the time): the outsiders first, whose requests
    must change nothing of the blue team's, then the others, the admin's removals last of all."""
    wrong: dict[str, str] = {}
    for persona in "XNRVTOA":
        before = _blue_rows()
        wrong |= {f"{persona} {name}": why for name, why in _walk(persona, world, request).items()}
        if persona in "XNR":
            assert _blue_rows() == before, f"{persona}: an outsider's request changed or created a blue row"
    assert not wrong, "\n".join(f"{name}: {why}" for name, why in sorted(wrong.items()))


def test_every_operation_and_console_url_is_in_the_table():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = {op["operationId"] for ops in schema["paths"].values() for op in ops.values()}
    assert operations == set(API), f"missing: {sorted(operations - set(API))}, gone: {sorted(set(API) - operations)}"
    names: set[str] = set()

    def walk(patterns: list[Any], namespace: str = "") -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                if p.namespace != "admin":  # the Django admin: the admin role only (tests/console/test_admin.py)
                    walk(p.url_patterns, f"{namespace}{p.namespace}:" if p.namespace else namespace)
            elif isinstance(p, URLPattern) and p.name and not p.name.startswith("api-"):
                names.add(f"{namespace}{p.name}")

    walk(get_resolver().url_patterns)
    assert names - set(CONSOLE) - set(NOT_WALKED) == set(), "a console URL with no row in CONSOLE"
    assert set(CONSOLE) | set(NOT_WALKED) <= names, "a row names a URL that no longer exists"
    for expected in [e for _, e in API.values()] + [e for _, e in CONSOLE.values()]:
        assert set(expected) <= set("ormfs") and len(expected) in (len(PERSONAS), 5), expected

"""The operator trail is complete and tamper-evident (docs/trail.md).

Every URL and API operation that changes state is enumerated from the URL resolver and the OpenAPI schema,
so a new one cannot slip out: each is either a scenario here, which must write exactly one trail row in
the change's own transaction (a failure forced right after the row leaves neither), or exempt with the
reason written beside it. The chain check catches a row edited behind the writer's back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

from audits.checks import audit_trail_verification
from journals.models import ApiToken, Run, Turn
from journals.services import records_ingest
from notifications.models import Webhook, WebhookDelivery
from recovery.findings.models import Finding
from recovery.models import GateDecision
from recovery.packages.models import PackageUpload
from recovery.repair.models import JournalRepair
from recovery.services import assessment_refresh
from tests.gate.test_repair import RUN as BROKEN
from tests.gate.test_repair import _break_seq, _broken
from tests.imports.charge_history import history_bytes
from tests.journal_builder import JournalBuilder
from trail import chain as trail
from trail.chain import trail_verify
from trail.models import OperatorAction, TrailHead
from trail.tokens import api_token_create

pytestmark = pytest.mark.django_db

# Operations that change state but are not a person's or a token's act on the trail, and why.
EXEMPT_OPERATIONS = {
    # The runtime's own protocol: its evidence is the append-only journal, claims and recovery audits.
    "records_ingest": "the journal itself (append-only, hash-chained) is the record of ingest",
    "turn_claim": "TurnClaim rows (fencing tokens) are the record of the runtime's leases",
    "turn_release": "TurnClaim.released_at is the record of the runtime's release",
    "recovery_open": "RecoveryAudit (append-only) is the record of a recovery",
    "recovery_action_report": "RecoveryAuditAction (append-only) is the record of what the runtime did",
    "recovery_close": "RecoveryAuditClosure (append-only) is the record of a recovery's end",
    "assessments_refresh": "a deterministic recomputation of stored inputs, nobody's decision",
    "repairs_preview": "stores nothing (asserted in tests/gate/test_repair.py)",
    "v1_notification_channels_test_create": "a test message on a channel changes no setting; its delivery is in the "
    "delivery log",
}
# Console paths that change state (or hand out raw bytes) and are scenarios; the rest are read-only pages.
EXEMPT_URLS = {
    "console:preferences": "the operator's own session (time zone), no shared state",
    "console:saved_view_create": "a person's own saved filter (console.SavedView), seen by nobody else; no run's "
    "state",
    "console:saved_view_delete": "a person's own saved filter (console.SavedView), seen by nobody else; no run's "
    "state",
    "console:bulk": "each decision is turn_approve / turn_block, one row per turn (tests/api/test_bulk.py counts "
    "them; the API's turns_bulk is a scenario here)",
    "console:effect_map_propose": "opens the map editor pre-filled; stores nothing",
    "notices:channel_test": "a test message on a channel changes no setting; its delivery is in the delivery log",
    "login": "Django's sign-in", "logout": "Django's sign-out",
    "oidc_authentication_init": "the company's sign-in (OpenID Connect), a person's own session",
    "oidc_authentication_callback": "the company's sign-in (OpenID Connect), a person's own session",
    "password_change": "a person's own password, through Django's auth views",
    "password_reset": "Django's reset mail", "password_reset_confirm": "Django's reset",
}
READ_ONLY_URLS = {
    "console:overview", "console:blocked_queue", "console:runs", "console:run", "console:turns", "console:turn",
    "console:findings", "console:packages", "console:package", "console:package_status", "console:trail",
    "console:imports", "console:import", "console:import_status", "console:effect_maps", "console:effect_map",
    "console:records", "console:record", "console:inbox_count", "favicon",
    "password_change_done", "password_reset_done", "password_reset_complete", "healthz", "readyz", "metrics",
    "api-schema", "api-schema-ui", "notices:teams", "notices:team",
}


# --- a small world every scenario acts on ---------------------------------------------------------------


@pytest.fixture
def world(db: Any, operator: Any, no_broker: list[str]) -> dict[str, Any]:
    broken, _ = _broken()
    records_ingest(run_id=BROKEN, body=broken.body(), content_type="application/x-ndjson", token=None)
    assessment_refresh(run=Run.objects.get(run_id=BROKEN))
    ok = JournalBuilder("run-ok")
    ok.plan("t1")
    ok.commit("t1", "plan")
    records_ingest(run_id="run-ok", body=ok.body(), content_type="application/x-ndjson", token=None)
    run = Run.objects.get(run_id="run-ok")
    assessment_refresh(run=run)
    from recovery.findings.services import finding_open_or_touch

    finding, _ = finding_open_or_touch(kind="lost_turn", run=run, turn=Turn.objects.get(run=run, turn_id="t1"))
    token, _ = api_token_create(name="rt", actor_name="test")
    hook = Webhook.objects.create(name="hook", url="https://example.invalid/h", secret="s" * 20,
                                  events=["turn.blocked"])
    from notifications import delivery

    delivery.enqueue("turn.blocked", ("x", 1), {"run_id": "run-ok"})
    upload = PackageUpload.objects.create(sha256="0" * 64, size=1, uploader_name="x")
    from recovery.services import turn_block

    turn_block(turn=Turn.objects.get(run=run, turn_id="t1"), actor=operator, reason="held first")
    from recovery.assignments.services import turn_assign

    # The operator has taken t1 for review: releasing it, or handing it on, is one act each.
    turn_assign(turn=Turn.objects.get(run=run, turn_id="t1"), actor=operator, assignee=operator)
    from recovery.imports.services import effect_map_create, history_upload_receive

    effect_map_create(name="fx", entries={"SendReceipt": "idempotent"}, actor=operator, reason="the first map")
    imported, _ = history_upload_receive(
        file=SimpleUploadedFile("h.json", history_bytes(), content_type="application/json"),
        source="temporal",
        actor=operator,
    )
    from notifications.models import NotificationRule, TeamChannel
    from teams.models import Team

    team = Team.objects.get(name="all-runs")  # the operator's team
    channel = TeamChannel.objects.create(team=team, name="mail", kind="email", target="ops@example.test")
    rule = NotificationRule.objects.create(team=team, name="held", mode="digest")
    return {"run": run, "broken": Run.objects.get(run_id=BROKEN), "finding": finding, "token": token,
            "team": team, "channel": channel, "rule": rule,
            "hook": hook, "delivery": WebhookDelivery.objects.order_by("id").first(), "upload": upload,
            "turn": Turn.objects.get(run=run, turn_id="t1"), "import": imported}


def _ok(answer: Any) -> Any:
    assert answer.status_code < 400, (answer.status_code, getattr(answer, "content", b"")[:400])
    if hasattr(answer, "streaming_content"):
        b"".join(answer.streaming_content)
    return answer


def _repair_api(c: Any, w: dict[str, Any]) -> Any:
    req = {"kind": "accept_prefix", "through_seq": _break_seq(w["broken"]) - 1, "reason": "cut"}
    preview = c.post(f"/api/v1/runs/{BROKEN}/repairs/preview", req, format="json").json()
    return c.post(f"/api/v1/runs/{BROKEN}/repairs", {**req, "preview": preview["preview"]}, format="json")


def _repair_console(c: Any, w: dict[str, Any]) -> Any:
    req = {"kind": "accept_prefix", "through_seq": _break_seq(w["broken"]) - 1, "reason": "cut"}
    preview = c.post(f"/api/v1/runs/{BROKEN}/repairs/preview", req, format="json").json()
    return c.post(f"/runs/{w['broken'].pk}/repair/", {**req, "preview": preview["preview"], "apply": "1"})


def _approve(c: Any, w: dict[str, Any], path: str) -> Any:
    return c.post(path, {"reason": "looked at it"}, format="json")  # the world holds t1 by an operator's block


Scenario = tuple[str, Callable[[Any, dict[str, Any]], Any]]  # (persona, act)
def _channel_form(w: dict[str, Any]) -> dict[str, Any]:
    return {"team": w["team"].pk, "name": "mail-2", "kind": "email", "target": "b@example.test", "active": "on"}


def _rule_form(w: dict[str, Any]) -> dict[str, Any]:
    return {"team": w["team"].pk, "name": "held-2", "mode": "immediate", "threshold_minutes": 0, "active": "on"}


SCENARIOS: dict[str, Scenario] = {
    # a team's notification channels and rules (API and console)
    "v1_notification_channels_create": ("operator", lambda c, w: c.post(
        "/api/v1/notification-channels", _channel_form(w), format="json")),
    "v1_notification_channels_update": ("operator", lambda c, w: c.put(
        f"/api/v1/notification-channels/{w['channel'].pk}", _channel_form(w), format="json")),
    "v1_notification_channels_partial_update": ("operator", lambda c, w: c.patch(
        f"/api/v1/notification-channels/{w['channel'].pk}", {"name": "mail-3"}, format="json")),
    "v1_notification_channels_destroy": ("operator", lambda c, w: c.delete(
        f"/api/v1/notification-channels/{w['channel'].pk}")),
    "v1_notification_rules_create": ("operator", lambda c, w: c.post(
        "/api/v1/notification-rules", _rule_form(w), format="json")),
    "v1_notification_rules_update": ("operator", lambda c, w: c.put(
        f"/api/v1/notification-rules/{w['rule'].pk}", _rule_form(w), format="json")),
    "v1_notification_rules_partial_update": ("operator", lambda c, w: c.patch(
        f"/api/v1/notification-rules/{w['rule'].pk}", {"threshold_minutes": 30}, format="json")),
    "v1_notification_rules_destroy": ("operator", lambda c, w: c.delete(f"/api/v1/notification-rules/{w['rule'].pk}")),
    "notices:channel_new": ("operator", lambda c, w: c.post(
        f"/notifications/teams/{w['team'].pk}/channels/new/", _channel_form(w))),
    "notices:channel_edit": ("operator", lambda c, w: c.post(
        f"/notifications/teams/{w['team'].pk}/channels/{w['channel'].pk}/", _channel_form(w))),
    "notices:channel_delete": ("operator", lambda c, w: c.post(
        f"/notifications/teams/{w['team'].pk}/channels/{w['channel'].pk}/delete/")),
    "notices:rule_new": ("operator", lambda c, w: c.post(
        f"/notifications/teams/{w['team'].pk}/rules/new/", _rule_form(w))),
    "notices:rule_edit": ("operator", lambda c, w: c.post(
        f"/notifications/teams/{w['team'].pk}/rules/{w['rule'].pk}/", _rule_form(w))),
    "notices:rule_delete": ("operator", lambda c, w: c.post(
        f"/notifications/teams/{w['team'].pk}/rules/{w['rule'].pk}/delete/")),
    # the API's operations (operationId)
    "turn_block": ("operator", lambda c, w: c.post("/api/v1/runs/run-ok/turns/t1/block", {"reason": "hold"},
                                                   format="json")),
    "turn_approve": ("operator", lambda c, w: _approve(c, w, "/api/v1/runs/run-ok/turns/t1/approve")),
    "findings_acknowledge": ("operator", lambda c, w: c.post(f"/api/v1/findings/{w['finding'].pk}/acknowledge",
                                                             {"reason": "mine"}, format="json")),
    "findings_resolve": ("operator", lambda c, w: c.post(f"/api/v1/findings/{w['finding'].pk}/resolve",
                                                         {"reason": "done"}, format="json")),
    "packages_upload": ("operator", lambda c, w: c.post("/api/v1/packages", b"not yet checked",
                                                        content_type="application/octet-stream")),
    "repairs_apply": ("operator", _repair_api),
    # One turn is held in the world (t1, blocked by an operator): a bulk approval of it is one decision, one row.
    "turns_bulk": ("operator", lambda c, w: c.post("/api/v1/turns/bulk", {
        "action": "approve", "reason": "reviewed", "filter": {"run": "run-ok", "state": "held"}}, format="json")),
    "imports_upload": ("operator", lambda c, w: c.post("/api/v1/imports", {
        "file": SimpleUploadedFile("other.json", history_bytes(run_id="trail-other"), content_type="application/json"),
        "source": "temporal", "run": "trail-other"}, format="multipart")),
    "schedules_change": ("admin", lambda c, w: c.patch(f"/api/v1/schedules/{_schedule()}", {
        "enabled": False, "reason": "paused for the upgrade"}, format="json")),
    "turn_annotations_update": ("operator", lambda c, w: c.post(f"/api/v1/runs/{BROKEN}/turns/t1/annotations", {
        "notes": "the disk was replaced", "reason": "context for the next shift"}, format="json")),
    "tokens_create": ("admin", lambda c, w: c.post("/api/v1/tokens", {"name": "new"}, format="json")),
    "tokens_revoke": ("admin", lambda c, w: c.post(f"/api/v1/tokens/{w['token'].pk}/revoke")),
    "v1_webhooks_create": ("admin", lambda c, w: c.post("/api/v1/webhooks", {
        "name": "h2", "url": "https://example.invalid/2", "secret": "t" * 20, "events": []}, format="json")),
    "v1_webhooks_update": ("admin", lambda c, w: c.put(f"/api/v1/webhooks/{w['hook'].pk}", {
        "name": "hook", "url": "https://example.invalid/3", "events": [], "active": False}, format="json")),
    "v1_webhooks_partial_update": ("admin", lambda c, w: c.patch(f"/api/v1/webhooks/{w['hook'].pk}",
                                                                 {"active": False}, format="json")),
    "v1_webhooks_destroy": ("admin", lambda c, w: c.delete(f"/api/v1/webhooks/{w['hook'].pk}")),
    "v1_webhook_deliveries_resend_create": ("operator", lambda c, w: c.post(
        f"/api/v1/webhook-deliveries/{w['delivery'].pk}/resend")),
    "turn_assign": ("operator", lambda c, w: c.post("/api/v1/runs/run-ok/turns/t1/assign", {
        "assignee": _admin_name(), "reason": "the payments lead knows this card"}, format="json")),
    "turn_unassign": ("operator", lambda c, w: c.post("/api/v1/runs/run-ok/turns/t1/unassign", {}, format="json")),
    # GETs that hand out what the trail must know about
    "api-run-export": ("operator", lambda c, w: c.get("/api/v1/runs/run-ok/export")),
    "api-operator-actions-export": ("operator", lambda c, w: c.get("/api/v1/operator-actions/export?output=csv")),
    # the console's paths (URL names)
    "console:approve": ("operator", lambda c, w: c.post(f"/turns/{w['turn'].pk}/approve/", {"reason": "looked"})),
    "console:block": ("operator", lambda c, w: c.post(f"/turns/{w['turn'].pk}/block/", {"reason": "hold"})),
    "console:assign": ("operator", lambda c, w: c.post(f"/turns/{w['turn'].pk}/assign/", {
        "assignee": _admin_name(), "reason": "handing over"})),
    "console:unassign": ("operator", lambda c, w: c.post(f"/turns/{w['turn'].pk}/unassign/")),
    "console:finding_acknowledge": ("operator", lambda c, w: c.post(
        f"/findings/{w['finding'].pk}/acknowledge/", {"reason": "mine"})),
    "console:finding_resolve": ("operator", lambda c, w: c.post(f"/findings/{w['finding'].pk}/resolve/",
                                                                {"reason": "done"})),
    "console:package_upload": ("operator", lambda c, w: c.post(
        "/packages/upload/", {"package": _file(b"bytes of a package")})),
    "console:package_requeue": ("operator", lambda c, w: c.post(f"/packages/{w['upload'].pk}/requeue/")),
    "console:import_upload": ("operator", lambda c, w: c.post("/imports/upload/", {
        "file": SimpleUploadedFile("other.json", history_bytes(run_id="trail-other"), content_type="application/json"),
        "source": "temporal", "run": "trail-other"})),
    "console:import_requeue": ("operator", lambda c, w: c.post(f"/imports/{w['import'].pk}/requeue/")),
    "console:effect_map_new": ("operator", lambda c, w: c.post("/effect-maps/new/", {
        "name": "fx-2", "entries": "LookupOrder = safe", "default": "unsafe", "reason": "a second map"})),
    "console:effect_map_save": ("operator", lambda c, w: c.post("/effect-maps/fx/save/", {
        "entries": "LookupOrder = safe", "default": "unsafe", "reason": "the order lookup reads only"})),
    "console:effect_map_attach": ("operator", lambda c, w: c.post("/effect-maps/fx/attach/", {
        "system": "temporal", "key": "*", "reason": "every namespace"})),
    "console:run_repair": ("operator", _repair_console),
    "console:run_export": ("operator", lambda c, w: c.get(f"/runs/{w['run'].pk}/export/")),
    "console:trail_export": ("operator", lambda c, w: c.get("/trail/export/?format=jsonl")),
    # the admin's edits (Django admin), one of each family
    "admin:user_add": ("admin", lambda c, w: c.post("/admin/auth/user/add/", {
        "username": "newbie", "password1": "a-Long-passw0rd!", "password2": "a-Long-passw0rd!",
        "usable_password": "true"})),
    "admin:group_change": ("admin", lambda c, w: c.post(f"/admin/auth/group/{_group('viewer')}/change/", {
        "name": "viewer", "permissions": []})),
    "admin:webhook_change": ("admin", lambda c, w: c.post(f"/admin/notifications/webhook/{w['hook'].pk}/change/", {
        "name": "hook", "url": "https://example.invalid/9", "secret": "", "events": ["turn.blocked"]})),
}


def _file(data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("p.tar.gz", data)


def _schedule() -> int:
    from django_celery_beat.models import PeriodicTask

    return PeriodicTask.objects.get(name="audit: trail verification").pk


def _admin_name() -> str:
    from django.contrib.auth.models import User

    return User.objects.get(is_superuser=True).username


def _group(name: str) -> int:
    from django.contrib.auth.models import Group

    return Group.objects.get(name=name).pk


def _state() -> list[Any]:
    """Everything a scenario may change, as plain values (the forced failure must leave it all as it was)."""
    from django.contrib.auth.models import Group, User
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from console.models import TurnAnnotation
    from recovery.assignments.models import TurnAssignment

    return [
        list(OperatorAction.objects.order_by("seq").values_list("seq", "digest")),
        list(TrailHead.objects.values_list("seq", "digest")),
        list(GateDecision.objects.values_list("pk", "kind")),
        list(Finding.objects.order_by("pk").values_list("pk", "state")),
        list(ApiToken.objects.order_by("pk").values_list("pk", "revoked_at")),
        list(Webhook.objects.order_by("pk").values_list("pk", "url", "active", "secret")),
        list(WebhookDelivery.objects.order_by("pk").values_list("pk", "status", "attempt_limit")),
        list(PackageUpload.objects.order_by("pk").values_list("pk", "enqueued_at")),
        list(JournalRepair.objects.values_list("pk")),
        list(User.objects.order_by("pk").values_list("pk", "username")),
        [(g.pk, sorted(g.permissions.values_list("pk", flat=True))) for g in Group.objects.order_by("pk")],
        list(IntervalSchedule.objects.order_by("pk").values_list("pk", "every")),
        list(PeriodicTask.objects.order_by("pk").values_list("pk", "enabled", "interval_id")),
        list(TurnAnnotation.objects.order_by("pk").values_list("pk", "notes")),
        list(TurnAssignment.objects.order_by("pk").values_list("pk", "assignee_id", "assigned_at")),
    ]


def _client(request: pytest.FixtureRequest, persona: str) -> Any:
    return request.getfixturevalue("operator_client" if persona == "operator" else "admin_client_api")


@pytest.fixture
def superadmin(admin_user: Any) -> Any:
    admin_user.is_superuser = True  # the admin of auth and beat models needs their model permissions
    admin_user.save()
    return admin_user


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_act_writes_exactly_one_trail_row(name: str, world: dict[str, Any], superadmin: Any,
                                               request: pytest.FixtureRequest) -> None:
    persona, act = SCENARIOS[name]
    before = OperatorAction.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    answer = _ok(act(_client(request, persona), world))
    rows = list(OperatorAction.objects.filter(seq__gt=before).order_by("seq"))
    # A preview on the way (repairs) writes nothing; only the act itself is recorded.
    assert len(rows) == 1, (name, [r.kind for r in rows], answer.status_code)
    assert rows[0].actor_name in ("olivia-operator", "ada-admin")
    on_page = name.startswith(("console:", "notices:"))  # the console's pages, the notifications' among them
    expected_via = "admin" if name.startswith("admin:") else "console" if on_page else "api"
    assert rows[0].via == expected_via
    assert not trail_verify().problems


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_failure_after_the_row_leaves_neither(name: str, world: dict[str, Any], superadmin: Any,
                                               request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    persona, act = SCENARIOS[name]
    client = _client(request, persona)
    state = _state()
    real = trail.trail_append

    def append_then_fail(**kwargs: Any) -> OperatorAction:
        real(**kwargs)
        raise RuntimeError("failpoint: after the trail row")

    monkeypatch.setattr(trail, "trail_append", append_then_fail)
    with pytest.raises(RuntimeError, match="failpoint"):
        answer = act(client, world)
        _ok(answer)  # a streamed export records before its first byte: consume it
    assert _state() == state


# --- enumeration: nothing that changes state slips out ----------------------------------------------------


def _url_names(patterns: list[Any], namespace: str = "") -> set[str]:
    names: set[str] = set()
    for p in patterns:
        if isinstance(p, URLResolver):
            if p.namespace == "admin":
                continue  # the admin is enumerated by its registered models below
            inner = f"{namespace}{p.namespace}:" if p.namespace else namespace
            names |= _url_names(p.url_patterns, inner)
        elif isinstance(p, URLPattern) and p.name:
            names.add(f"{namespace}{p.name}")
    return names


def test_every_state_changing_operation_of_the_api_is_a_scenario_or_exempt() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    writes = {op["operationId"] for ops in schema["paths"].values() for method, op in ops.items()
              if method in ("post", "put", "patch", "delete")}
    missing = writes - set(SCENARIOS) - set(EXEMPT_OPERATIONS)
    assert not missing, f"operations that change state with no trail scenario: {sorted(missing)}"
    assert not (set(EXEMPT_OPERATIONS) - writes), "an exemption names an operation that no longer exists"


def test_every_console_url_is_read_only_a_scenario_or_exempt() -> None:
    names = {n for n in _url_names(get_resolver().url_patterns) if not n.startswith("api-")}
    unknown = names - READ_ONLY_URLS - set(SCENARIOS) - set(EXEMPT_URLS)
    assert not unknown, f"console URLs not classified for the trail: {sorted(unknown)}"


def test_every_writable_admin_model_is_audited(superadmin: Any, rf: Any) -> None:
    from django.contrib import admin

    from console.admin import TurnAdmin
    from notifications.admin import WebhookDeliveryAdmin
    from trail.admin import ApiTokenAdmin
    from trail.admin_mixin import AuditedAdminMixin

    request = rf.get("/admin/")
    request.user = superadmin
    # These write through services that record their own rows (turn_annotate, api_token_create/revoke, and
    # delivery_resend: a delivery's change form is read-only, its one write the resend action).
    by_service = (TurnAdmin, ApiTokenAdmin, WebhookDeliveryAdmin)
    for model, model_admin in admin.site._registry.items():
        writable = (model_admin.has_add_permission(request) or model_admin.has_change_permission(request, None)
                    or model_admin.has_delete_permission(request, None))
        if writable:
            assert isinstance(model_admin, (AuditedAdminMixin, *by_service)), f"{model.__name__}'s admin is not audited"


# --- tamper evidence -------------------------------------------------------------------------------------


def _behind_the_writers_back(sql: str, params: list[Any]) -> None:
    """Raw SQL as an intruder with the database's superuser would run it: on PostgreSQL the append-only
    trigger refuses it, so triggers are switched off for the session first (replica role)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = replica")
        try:
            cursor.execute(sql, params)
        finally:
            if connection.vendor == "postgresql":
                cursor.execute("SET session_replication_role = origin")


def test_the_chain_check_catches_an_edited_row(world: dict[str, Any]) -> None:
    api_token_create(name="second", actor_name="test")
    assert not trail_verify().problems
    victim = OperatorAction.objects.order_by("seq").first()
    assert victim is not None and OperatorAction.objects.count() >= 2
    _behind_the_writers_back("UPDATE trail_operatoraction SET reason = %s WHERE id = %s", ["edited", victim.pk])
    problems = trail_verify().problems
    assert [p.fact_key for p in problems] == [f"row:{victim.seq}"]
    report = audit_trail_verification()
    assert report.counts["trail_broken_opened"] == 1
    finding = Finding.objects.get(kind="trail_broken")
    assert finding.run is None and finding.evidence["seq"] == victim.seq
    # Seen again, it is the same finding.
    assert audit_trail_verification().counts["trail_broken_seen"] == 1


def test_a_removed_last_row_shows_at_the_head(world: dict[str, Any]) -> None:
    last = OperatorAction.objects.order_by("-seq").first()
    assert last is not None
    _behind_the_writers_back("DELETE FROM trail_operatoraction WHERE id = %s", [last.pk])
    assert [p.fact_key for p in trail_verify().problems] == ["head"]


def test_rows_chain_in_order(world: dict[str, Any]) -> None:
    rows = list(OperatorAction.objects.order_by("seq"))
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert all(b.prev_digest == a.digest for a, b in zip(rows, rows[1:], strict=False))
    assert TrailHead.objects.get().digest == rows[-1].digest

from django.urls import path

from audits import views

T = "runs/<str:run_id>/turns/<str:turn_id>"

urlpatterns = [
    path(f"{T}/recovery", views.TurnRecoveryView.as_view(), name="api-turn-recovery"),
    path(f"{T}/recovery/<int:audit_id>", views.RecoveryAuditDetailView.as_view(), name="api-recovery-audit"),
    path(f"{T}/recovery/<int:audit_id>/actions", views.RecoveryActionView.as_view(), name="api-recovery-actions"),
    path(f"{T}/recovery/<int:audit_id>/close", views.RecoveryCloseView.as_view(), name="api-recovery-close"),
    path("audits", views.AuditListView.as_view(), name="api-audits"),
    path("operator-actions", views.OperatorActionListView.as_view(), name="api-operator-actions"),
    path("operator-actions/export", views.OperatorActionExportView.as_view(), name="api-operator-actions-export"),
    path("findings", views.FindingListView.as_view(), name="api-findings"),
    path("findings/<int:finding_id>", views.FindingDetailView.as_view(), name="api-finding"),
    path("findings/<int:finding_id>/acknowledge", views.FindingAcknowledgeView.as_view(), name="api-finding-ack"),
    path("findings/<int:finding_id>/resolve", views.FindingResolveView.as_view(), name="api-finding-resolve"),
    path("schedules", views.ScheduleListView.as_view(), name="api-schedules"),
    path("schedules/<int:schedule_id>", views.ScheduleDetailView.as_view(), name="api-schedule"),
    path("tokens", views.TokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/revoke", views.TokenRevokeView.as_view(), name="api-token-revoke"),
]

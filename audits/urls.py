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
]

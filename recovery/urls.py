from django.urls import path

from recovery import views
from recovery.imports import views as import_views
from recovery.packages import views as package_views
from recovery.repair import views as repair_views

T = "runs/<str:run_id>/turns/<str:turn_id>"

urlpatterns = [
    path("runs/<str:run_id>/assessments", views.AssessmentListView.as_view(), name="api-assessments"),
    path(
        "runs/<str:run_id>/assessments/<int:assessment_id>", views.AssessmentDetailView.as_view(), name="api-assessment"
    ),
    path("runs/<str:run_id>/export", package_views.RunExportView.as_view(), name="api-run-export"),
    path("runs/<str:run_id>/repairs", repair_views.RepairListView.as_view(), name="api-repairs"),
    path("runs/<str:run_id>/repairs/preview", repair_views.RepairPreviewView.as_view(), name="api-repair-preview"),
    path("packages", package_views.PackageUploadView.as_view(), name="api-packages"),
    path("packages/<uuid:upload_id>", package_views.PackageDetailView.as_view(), name="api-package"),
    path("turns/bulk", views.BulkDecisionView.as_view(), name="api-turns-bulk"),
    path("imports", import_views.ImportUploadView.as_view(), name="api-imports"),
    path("imports/<uuid:import_id>", import_views.ImportDetailView.as_view(), name="api-import"),
    path("runs/<str:run_id>/import", import_views.RunImportView.as_view(), name="api-run-import"),
    path(f"{T}/intent-classes", import_views.IntentClassListView.as_view(), name="api-turn-intent-classes"),
    path(f"{T}/decision", views.DecisionView.as_view(), name="api-turn-decision"),
    path(f"{T}/claim", views.ClaimView.as_view(), name="api-turn-claim"),
    path(f"{T}/release", views.ReleaseView.as_view(), name="api-turn-release"),
    path(f"{T}/approve", views.ApproveView.as_view(), name="api-turn-approve"),
    path(f"{T}/block", views.BlockView.as_view(), name="api-turn-block"),
    path(f"{T}/assign", views.AssignView.as_view(), name="api-turn-assign"),
    path(f"{T}/unassign", views.UnassignView.as_view(), name="api-turn-unassign"),
    path(f"{T}/evidence", views.EvidenceListView.as_view(), name="api-turn-evidence"),
    path(f"{T}/gate-decisions", views.GateDecisionListView.as_view(), name="api-turn-gate-decisions"),
]

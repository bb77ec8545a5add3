from django.urls import path

from journals import views

urlpatterns = [
    path("limits", views.LimitsView.as_view(), name="api-limits"),
    path("runs", views.RunListView.as_view(), name="api-runs"),
    path("runs/<str:run_id>", views.RunDetailView.as_view(), name="api-run"),
    path("runs/<str:run_id>/records", views.RecordsView.as_view(), name="api-records"),
    path("runs/<str:run_id>/branches", views.BranchListView.as_view(), name="api-branches"),
    path("runs/<str:run_id>/turns", views.RunTurnListView.as_view(), name="api-run-turns"),
    path("runs/<str:run_id>/turns/<str:turn_id>", views.TurnDetailView.as_view(), name="api-turn"),
    path("runs/<str:run_id>/turns/<str:turn_id>/intents", views.TurnIntentListView.as_view(), name="api-turn-intents"),
    path("runs/<str:run_id>/turns/<str:turn_id>/records", views.TurnRecordListView.as_view(), name="api-turn-records"),
    path("turns", views.TurnListView.as_view(), name="api-turns"),
]

"""The console's URLs, mounted at the root by loopx_site/urls.py."""

from django.urls import path

from . import actions, findings, packages, views

app_name = "console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("queue/blocked/", views.blocked_queue, name="blocked_queue"),
    path("runs/", views.runs, name="runs"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("runs/<int:pk>/records/", views.run_records, name="records"),
    path("runs/<int:pk>/records/<int:branch>/<int:lsn>/", views.run_record, name="record"),
    path("turns/", views.turns, name="turns"),
    path("turns/bulk/", actions.bulk, name="bulk"),
    path("turns/<int:pk>/", views.turn_detail, name="turn"),
    path("turns/<int:pk>/approve/", actions.approve, name="approve"),
    path("turns/<int:pk>/block/", actions.block, name="block"),
    path("findings/", findings.findings, name="findings"),
    path("findings/<int:pk>/acknowledge/", findings.acknowledge, name="finding_acknowledge"),
    path("findings/<int:pk>/resolve/", findings.resolve, name="finding_resolve"),
    path("packages/", packages.packages, name="packages"),
    path("runs/<int:pk>/export/", packages.run_export, name="run_export"),
    path("packages/upload/", packages.package_upload, name="package_upload"),
    path("packages/<uuid:pk>/", packages.package_detail, name="package"),
    path("packages/<uuid:pk>/status/", packages.package_status, name="package_status"),
    path("packages/<uuid:pk>/requeue/", packages.package_requeue, name="package_requeue"),
    path("preferences/", views.preferences, name="preferences"),
]

"""The console's URLs, mounted at the root by loopx_site/urls.py."""

from django.urls import path
from django.views.generic import RedirectView

from . import actions, findings, imports, packages, saved_views, trail, views

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
    path("turns/<int:pk>/assign/", actions.assign, name="assign"),
    path("turns/<int:pk>/unassign/", actions.unassign, name="unassign"),
    path("inbox/count/", views.inbox_count, name="inbox_count"),
    path("findings/", findings.findings, name="findings"),
    path("findings/<int:pk>/acknowledge/", findings.acknowledge, name="finding_acknowledge"),
    path("findings/<int:pk>/resolve/", findings.resolve, name="finding_resolve"),
    path("packages/", packages.packages, name="packages"),
    path("runs/<int:pk>/export/", packages.run_export, name="run_export"),
    path("packages/upload/", packages.package_upload, name="package_upload"),
    path("packages/<uuid:pk>/", packages.package_detail, name="package"),
    path("packages/<uuid:pk>/status/", packages.package_status, name="package_status"),
    path("packages/<uuid:pk>/requeue/", packages.package_requeue, name="package_requeue"),
    path("runs/<int:pk>/repair/", trail.run_repair, name="run_repair"),
    path("trail/", trail.trail_page, name="trail"),
    # The page was called the audit log; old links and bookmarks still land on it.
    path("audit/", RedirectView.as_view(pattern_name="console:trail", query_string=True, permanent=True)),
    path("trail/export/", trail.trail_page_export, name="trail_export"),
    path("imports/", imports.imports, name="imports"),
    path("imports/upload/", imports.import_upload, name="import_upload"),
    path("imports/<uuid:pk>/", imports.import_detail, name="import"),
    path("imports/<uuid:pk>/status/", imports.import_status, name="import_status"),
    path("imports/<uuid:pk>/requeue/", imports.import_requeue, name="import_requeue"),
    path("effect-maps/", imports.effect_maps, name="effect_maps"),
    path("effect-maps/new/", imports.effect_map_new, name="effect_map_new"),
    path("effect-maps/propose/", imports.effect_map_propose, name="effect_map_propose"),
    path("effect-maps/<str:name>/", imports.effect_map_detail, name="effect_map"),
    path("effect-maps/<str:name>/save/", imports.effect_map_save, name="effect_map_save"),
    path("effect-maps/<str:name>/attach/", imports.effect_map_attach_view, name="effect_map_attach"),
    path("preferences/", views.preferences, name="preferences"),
    path("saved-views/", saved_views.saved_view_new, name="saved_view_create"),
    path("saved-views/<int:pk>/delete/", saved_views.saved_view_remove, name="saved_view_delete"),
]

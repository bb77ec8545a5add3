"""The console's pages of a team's notifications, mounted under /notifications/ (namespace ``notices``)."""

from django.urls import path

from . import views

app_name = "notices"

urlpatterns = [
    path("", views.team_list, name="teams"),
    path("teams/<int:team_id>/", views.team_page, name="team"),
    path("teams/<int:team_id>/channels/new/", views.channel_edit, name="channel_new"),
    path("teams/<int:team_id>/channels/<int:pk>/", views.channel_edit, name="channel_edit"),
    path("teams/<int:team_id>/channels/<int:pk>/delete/", views.channel_delete, name="channel_delete"),
    path("teams/<int:team_id>/channels/<int:pk>/test/", views.channel_test, name="channel_test"),
    path("teams/<int:team_id>/rules/new/", views.rule_edit, name="rule_new"),
    path("teams/<int:team_id>/rules/<int:pk>/", views.rule_edit, name="rule_edit"),
    path("teams/<int:team_id>/rules/<int:pk>/delete/", views.rule_delete, name="rule_delete"),
]

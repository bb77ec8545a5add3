"""/api/v1/: every app's API routes, mounted once by loopx_site/urls.py."""

from django.urls import include, path

urlpatterns = [
    path("", include("journals.urls")),
    path("", include("recovery.urls")),
    path("", include("audits.urls")),
]

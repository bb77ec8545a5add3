"""Operability endpoints, mounted at the site root (load balancers and Prometheus expect these paths)."""

from django.urls import path

from . import health, metrics

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
]

"""Top-level URLs. Each app owns its own urls module; this file only mounts them."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("loopx_site.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/schema/ui/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-schema-ui"),
    # Operability: /healthz, /readyz, /metrics at the root; webhooks under the API.
    path("", include("loopx_site.ops.urls")),
    path("api/v1/", include("notifications.urls")),
    # The operator console owns the root; mounted last so that the paths above win.
    path("", include("console.urls")),
]

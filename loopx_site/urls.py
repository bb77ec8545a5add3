"""Top-level URLs. Each app owns its own urls module; this file only mounts them."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console import errors
from console.views import favicon
from loopx_site.oidc import CallbackView, SignInView

urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    # OpenID Connect sign-in (loopx_site/oidc.py): 404 unless configured.
    path("oidc/authenticate/", SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
    path("api/v1/", include("loopx_site.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/schema/ui/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-schema-ui"),
    # Someone who types /api/ is looking for the API: the explorer is where its operations are listed.
    path("api/", RedirectView.as_view(pattern_name="api-schema-ui"), name="api-root"),
    # Operability: /healthz, /readyz, /metrics at the root; webhooks under the API.
    path("", include("ops.urls")),
    path("api/v1/", include("notifications.urls")),
    path("api/v1/", include("console.api")),
    # A team's notification channels and rules (notifications/views.py).
    path("notifications/", include("notifications.console_urls")),
    # The operator console owns the root; mounted last so that the paths above win.
    path("", include("console.urls")),
]

# Error pages in the console's look, never a list of URL patterns (console/errors.py).
handler403 = errors.permission_denied
handler404 = errors.page_not_found
handler500 = errors.server_error

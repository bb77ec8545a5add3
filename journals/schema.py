"""OpenAPI description of the runtime token authentication (drf-spectacular extension)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # drf-spectacular leaves __init_subclass__ unannotated
    target_class = "journals.authentication.ApiTokenAuthentication"
    name = "runtimeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A runtime API token (manage.py create_api_token NAME [--run-prefix P]).",
        }

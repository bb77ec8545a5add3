"""The Django admin, opened to the `admin` role (journals/access.py) as well as to staff.

Django's stock site asks for ``is_staff``; roles here are groups, so without this an admin-role user
could not open the admin at all. Model-level permissions still apply (audits/roles.py keeps the admin
group's permissions complete).
"""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest


class LoopxAdminSite(AdminSite):
    site_header = "LoopX Recovery Audit administration"
    site_title = "LoopX admin"

    def has_permission(self, request: HttpRequest) -> bool:
        from journals.access import can_administer  # imports models, which wait for the app registry

        user = request.user
        return bool(user.is_active and (user.is_staff or can_administer(user)))


class LoopxAdminConfig(AdminConfig):
    default_site = "loopx_site.admin_site.LoopxAdminSite"

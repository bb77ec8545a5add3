"""Outgoing webhooks for operational events, and the wiring of loopx_site.ops (metrics, logs, retention)."""

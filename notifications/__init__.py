"""Outgoing webhooks for operational events, and the wiring of ops (metrics, logs, retention)."""

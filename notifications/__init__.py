"""Outgoing webhooks for operational events."""

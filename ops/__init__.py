"""Operability: metrics, health, structured logs, request ids, events and retention.

An app-less package: nothing here has models. The `notifications` app (INSTALLED_APPS) wires the signal
receivers of this package in its ``ready()`` and owns the webhook models, the Celery tasks and the
``retention_sweep`` command. docs/deployment.md describes how these pieces run in production.
"""

"""Audits: operator actions, recovery audits, scheduled audits and findings."""

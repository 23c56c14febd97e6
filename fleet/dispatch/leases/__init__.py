"""Lease implementations: Redis for a fleet, in-process for embedded mode and unit tests."""

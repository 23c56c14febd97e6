"""Dispatch: leases, wake-ups, the drain loop and the sweeper (Celery tasks stay thin)."""

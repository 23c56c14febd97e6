"""The HTTP API: SubmitTask and friends, webhook triggers, A2A, and the ops endpoints."""

"""Pure domain rules (no I/O), shared by the API, CLI, dispatcher and workers."""

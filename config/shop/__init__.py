"""Example tools for the `support` agent (config/agents/support.toml names them)."""

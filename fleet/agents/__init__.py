"""Agents: the run loop, model adapters and tools."""

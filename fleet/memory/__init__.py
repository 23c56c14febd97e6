"""Memory for agents: blocks attached to agents and conversation notes, as tools and context.

The tools talk to a ``MemoryPort`` (``port.py``) bound to one run; ``binding.py`` implements it
over the store. What a block edit or a note may be is decided in ``fleet.domain.blocks``.
"""

"""fleet's version, in a module of its own so that any module reads it without importing the
package's ``__init__`` (and, through it, the SDK)."""

__version__ = "0.5.0"

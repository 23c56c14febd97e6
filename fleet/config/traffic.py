"""``[[model_limits]]`` and ``[prices]`` of ``config/fleet.toml``: fleet-wide model traffic."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, StrictFloat, StrictInt, model_validator

from fleet.config.base import Duration, _matching, _Strict
from fleet.domain.model_limits import Limit

#: ``provider:model-glob``: a provider (or a glob of one), a colon, a glob of model names.
_MATCH = re.compile(r"^[a-z*?\[\]]+:\S+$")
#: ``provider:model``, exactly (a price is for one model).
_PRICED = re.compile(r"^(openai|anthropic):\S+$")
#: Longest ``max_wait``: a call holds its worker while it waits.
MAX_WAIT_S = 3600.0


class ModelLimitConfig(_Strict):
    """One ``[[model_limits]]`` entry: a fleet-wide rate limit on the calls to matching models.

    Every entry that matches a call applies (a provider-wide one and a model's own, say)."""

    #: Which calls it limits: a ``provider:model`` glob (``openai:*``, ``openai:gpt-4o*``,
    #: ``anthropic:*``).
    match: Annotated[
        str,
        _matching(_MATCH, "must be a 'provider:model' glob like 'openai:*' or 'openai:gpt-4o*'"),
    ]
    #: Calls a minute that may start, fleet-wide.
    requests_per_minute: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    #: Calls allowed at once above the steady rate (default: one second of
    #: ``requests_per_minute``, at least 1).
    burst: StrictInt | None = Field(default=None, ge=1, le=100_000)
    #: Tokens a minute, fleet-wide: each call is counted with its estimated tokens (a
    #: tokenizer where fleet has one, else characters / 4), corrected by the usage the
    #: provider reports.
    tokens_per_minute: StrictInt | None = Field(default=None, ge=1, le=1_000_000_000)
    #: Calls in flight at once, fleet-wide.
    max_concurrent: StrictInt | None = Field(default=None, ge=1, le=100_000)
    #: Longest a call waits for capacity (or a cooldown) before its step fails, or tries the
    #: agent's next fallback model. The waiting task stays ``running`` and holds its worker.
    max_wait: Duration = 60.0

    @model_validator(mode="after")
    def _limits_something(self) -> ModelLimitConfig:
        if not (self.requests_per_minute or self.tokens_per_minute or self.max_concurrent):
            raise ValueError(
                "set at least one of requests_per_minute, tokens_per_minute, max_concurrent"
            )
        if self.burst is not None and self.requests_per_minute is None:
            raise ValueError("burst needs requests_per_minute (it is a burst of requests)")
        if self.max_wait > MAX_WAIT_S:
            raise ValueError(
                f"max_wait must be at most {MAX_WAIT_S:g}s (a waiting call holds a worker)"
            )
        return self

    def limit(self) -> Limit:
        """The limiter's view of this entry."""
        return Limit(
            match=self.match,
            requests_per_minute=self.requests_per_minute,
            burst=self.burst,
            tokens_per_minute=self.tokens_per_minute,
            max_concurrent=self.max_concurrent,
            max_wait_s=self.max_wait,
        )


class PriceConfig(_Strict):
    """``[prices."provider:model"]``: what a model's tokens cost, per million, in your currency."""

    #: Price of a million input (prompt) tokens.
    input: StrictFloat | StrictInt = Field(ge=0, le=1_000_000)
    #: Price of a million output (completion) tokens.
    output: StrictFloat | StrictInt = Field(ge=0, le=1_000_000)


def check_prices(prices: dict[str, PriceConfig]) -> dict[str, PriceConfig]:
    """Each key names one model as ``provider:model``."""
    for key in prices:
        if not _PRICED.match(key):
            raise ValueError(
                f"prices: {key!r} must name one model as 'openai:<model>' or 'anthropic:<model>'"
            )
    return prices

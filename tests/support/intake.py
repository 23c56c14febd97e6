"""Helpers for intake tests: config folders with triggers and callers, row counts, A2A clients."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import AgentCard, Message, Part, Role, SendMessageRequest, StreamResponse, Task
from google.protobuf.json_format import MessageToDict
from sqlalchemy import create_engine, text

from tests.conftest import write_config

#: Tables whose rows a refused request must not create.
INTAKE_TABLES = ("tasks", "conversations", "idempotency_keys")


def write_intake_config(
    root: Path,
    *,
    triggers: Mapping[str, str] | None = None,
    callers: Mapping[str, str] | None = None,
) -> Path:
    """The usual agents and deployments plus ``triggers/*.toml`` and ``callers/*.toml``."""
    write_config(root)
    for section, files in (("triggers", triggers or {}), ("callers", callers or {})):
        folder = root / section
        folder.mkdir(parents=True, exist_ok=True)
        for name, body in files.items():
            (folder / f"{name}.toml").write_text(textwrap.dedent(body))
    return root


def caller_toml(source: str, env: str) -> str:
    return f'source = "{source}"\nkey_env = "{env}"\n'


def row_counts(database_url: str) -> dict[str, int]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return {
                t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
                for t in INTAKE_TABLES
            }
    finally:
        engine.dispose()


def a2a_send_raw(base: str, deployment: str, key: str, text: str) -> httpx.Response:
    """A v0.3 ``message/send`` of one text part as plain JSON-RPC over HTTP, answered as it is
    (an HTTP refusal before the SDK, such as a quota's 429, is not raised)."""
    message = {
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        "messageId": uuid.uuid4().hex,
    }
    return httpx.post(
        f"{base}/a2a/{deployment}",
        json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
        headers={"Authorization": f"Bearer {key}"},
    )


class A2A:
    """An a2a-sdk client of one deployment, speaking protocol 1.0 or 0.3, with a bearer key."""

    def __init__(
        self,
        base: str,
        deployment: str,
        *,
        key: str | None,
        version: str,
        streaming: bool = False,
    ) -> None:
        self.url = f"{base}/a2a/{deployment}"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(headers=headers, timeout=90)
        self.version = version
        self.streaming = streaming
        self.card: AgentCard | None = None
        self._client: Client | None = None

    async def __aenter__(self) -> A2A:
        card = await A2ACardResolver(self.http, self.url).get_agent_card()
        self.card = card
        keep = [i for i in card.supported_interfaces if i.protocol_version == self.version]
        assert keep, f"the card offers no {self.version} interface: {card.supported_interfaces}"
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(keep)
        config = ClientConfig(streaming=self.streaming, httpx_client=self.http)
        self._client = ClientFactory(config).create(card)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    async def send(
        self,
        text_: str,
        *,
        context_id: str | None = None,
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        return_immediately: bool = False,
    ) -> Task:
        msg = Message(
            message_id=message_id or uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=[Part(text=text_)],
        )
        if context_id:
            msg.context_id = context_id
        if metadata:
            msg.metadata.update(metadata)
        request = SendMessageRequest(message=msg)
        request.configuration.return_immediately = return_immediately
        found: list[StreamResponse] = [r async for r in self.client.send_message(request)]
        assert len(found) == 1 and found[0].HasField("task"), found
        return found[0].task


def reply_text(task: Task) -> str:
    """The reply artifact's text (what the echo model said)."""
    texts = [p.text for a in task.artifacts for p in a.parts if p.text]
    assert texts, f"task has no reply artifact: {MessageToDict(task)}"
    return texts[0]

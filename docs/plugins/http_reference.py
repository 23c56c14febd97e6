"""The HTTP reference, generated from the OpenAPI document of fleet's API.

Every operation with its method, path, summary, description, parameters, request body and
responses, then every schema they name, as Markdown. The document is the one ``fleet serve``
publishes at ``/openapi.json``: ``create_app()`` builds it without a runtime or a database.
"""

from __future__ import annotations

import re
from typing import Any

#: The page's path in the docs site.
PAGE = "reference/http.md"

#: Operation groups (OpenAPI tags) in the order the page shows them, with their headings.
TAGS = {
    "tasks": "Tasks",
    "runs": "Runs",
    "conversations": "Conversations (operators)",
    "memory": "Memory blocks (operators)",
    "tenants": "Tenants (operators)",
    "triggers": "Webhook triggers",
    "a2a": "A2A",
    "ops": "Health and metrics",
}

METHODS = ("get", "post", "put", "patch", "delete")

Json = dict[str, Any]


def openapi() -> Json:
    """The API's OpenAPI document, as ``fleet serve`` publishes it."""
    from fleet.api.app import create_app

    return create_app().openapi()


def operations(doc: Json) -> list[tuple[str, str, Json]]:
    """(method, path, operation) of every operation, in the document's order."""
    return [
        (method, path, op)
        for path, item in doc.get("paths", {}).items()
        for method, op in item.items()
        if method in METHODS
    ]


def _cell(text: str) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


class Schemas:
    """The schemas the page shows: the document's components and named inline ones (the
    problem+json body), each rendered once under ## Schemas."""

    def __init__(self, doc: Json) -> None:
        self.named: dict[str, Json] = dict(doc.get("components", {}).get("schemas", {}))

    def link(self, name: str) -> str:
        return f"[{name}](#{_anchor('schema-' + name)})"

    def type(self, schema: Json) -> str:
        """A schema's type in a few words, linking the named schemas it uses."""
        if not schema:
            return "any JSON"
        if "$ref" in schema:
            return self.link(schema["$ref"].rsplit("/", 1)[-1])
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                members = [s for s in schema[key] if s.get("type") != "null"]
                shown = " or ".join(self.type(s) for s in members)
                nullable = len(members) < len(schema[key])
                return shown + (" or null" if nullable else "") + self._bounds(schema)
        if schema.get("title") and schema.get("properties"):
            # an inline object with a name of its own (problem+json): listed with the others
            self.named.setdefault(schema["title"], schema)
            return self.link(schema["title"])
        kind = schema.get("type")
        if "enum" in schema:
            return " | ".join(f"`{v}`" for v in schema["enum"])
        if "const" in schema:
            return f"`{schema['const']}`"
        if kind == "array":
            return f"list of {self.type(schema.get('items', {}))}"
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return f"object of {self.type(extra)}"
            return "object"
        if isinstance(kind, list):
            return " or ".join(str(k) for k in kind)
        shown = str(kind or "any JSON")
        if "format" in schema:
            shown += f" ({schema['format']})"
        return shown + self._bounds(schema)

    @staticmethod
    def _bounds(schema: Json) -> str:
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is None and high is None:
            return ""

        def shown(v: Any) -> str:
            return f"{v:g}"

        if high is None:
            return f", at least {shown(low)}"
        if low is None:
            return f", at most {shown(high)}"
        return f", {shown(low)} to {shown(high)}"

    def render(self) -> list[str]:
        """## Schemas: each named schema's fields (named ones found on the way included)."""
        out = ["## Schemas", ""]
        done: set[str] = set()
        while pending := sorted(set(self.named) - done):
            name = pending[0]
            done.add(name)
            schema = self.named[name]
            out += [f"### {name} {{ #{_anchor('schema-' + name)} }}", ""]
            if schema.get("description"):
                out += [schema["description"], ""]
            props: Json = schema.get("properties", {})
            if "enum" in schema:
                out += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
            elif props:
                required = set(schema.get("required", []))
                out += ["| field | type | required | description |", "|---|---|---|---|"]
                for field, sub in props.items():
                    out.append(
                        f"| `{field}` | {_cell(self.type(sub))} | "
                        f"{'yes' if field in required else 'no'} | "
                        f"{_cell(sub.get('description', ''))} |"
                    )
                out.append("")
            else:
                out += [f"{self.type({k: v for k, v in schema.items() if k != 'title'})}.", ""]
        return out


def _operation(method: str, path: str, op: Json, schemas: Schemas) -> list[str]:
    name = op.get("operationId") or f"{method.upper()} {path}"
    out = [f"### {name} {{ #{_anchor(name)} }}", "", f"`{method.upper()} {path}`"]
    if op.get("summary"):
        out[-1] += f" — {op['summary']}"
    out.append("")
    if op.get("description"):
        out += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        out += [
            "**Parameters**",
            "",
            "| name | in | type | required | description |",
            "|---|---|---|---|---|",
        ]
        for p in params:
            schema = p.get("schema", {})
            default = schema.get("default")
            text = p.get("description") or schema.get("description") or ""
            if default is not None:
                text += f" (default: `{default}`)"
            out.append(
                f"| `{p['name']}` | {p['in']} | {_cell(schemas.type(schema))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(text)} |"
            )
        out.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            need = "required" if body.get("required") else "optional"
            out += [
                f"**Request body** (`{media}`, {need}): {schemas.type(content.get('schema', {}))}",
                "",
            ]
    out += ["**Responses**", "", "| status | meaning | body |", "|---|---|---|"]
    for status, answer in sorted(op.get("responses", {}).items()):
        bodies = [
            f"`{media}` {schemas.type(content.get('schema', {}))}"
            for media, content in answer.get("content", {}).items()
        ]
        meaning = answer.get("description", "")
        for header, spec in answer.get("headers", {}).items():
            meaning += f" Header `{header}`: {spec.get('description', '')}"
        out.append(f"| {status} | {_cell(meaning)} | {_cell('; '.join(bodies)) or '—'} |")
    out.append("")
    return out


def render(doc: Json | None = None) -> str:
    """The whole page, as Markdown."""
    doc = doc if doc is not None else openapi()
    schemas = Schemas(doc)
    info = doc.get("info", {})
    out = [
        "# HTTP reference",
        "",
        f"{info.get('description', '')} Every operation of the API (version "
        f"{info.get('version', '?')}), generated from the OpenAPI document that `fleet serve` "
        "publishes at `/openapi.json` when the docs are built, so it always matches the code. "
        "[HTTP API](../http/index.md) explains keys, scopes and errors; every error body is "
        f"{schemas.link('Problem')} (`application/problem+json`).",
        "",
    ]
    ops = operations(doc)
    by_tag: dict[str, list[tuple[str, str, Json]]] = {}
    for method, path, op in ops:
        by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    order = [t for t in TAGS if t in by_tag] + sorted(set(by_tag) - set(TAGS))
    out += ["| operation | method and path | summary |", "|---|---|---|"]
    for tag in order:
        for method, path, op in by_tag[tag]:
            name = op.get("operationId", "")
            out.append(
                f"| [{name}](#{_anchor(name)}) | `{method.upper()} {path}` | "
                f"{_cell(op.get('summary', ''))} |"
            )
    out.append("")
    for tag in order:
        out += [f"## {TAGS.get(tag, tag.title())}", ""]
        for method, path, op in by_tag[tag]:
            out += _operation(method, path, op, schemas)
    out += schemas.render()
    return "\n".join(out)


if __name__ == "__main__":
    print(render())

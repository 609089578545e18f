"""Secrets planted wherever a request can carry one never reach the database, Redis, files, logs,
the summarizer, a served response or an error body: through the real HTTP API, worker job and store."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import structlog
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlmodel import SQLModel

from tests.fakes.messages_api import FakeMessagesAPI, reply
from tests.integration.conftest import make_settings, open_app
from worker.flows import compact as jobs
from worker.resources import Resources
from worker.settings import Settings
from worker.store.db import read_tx
from worker.store.files import decompress

pytestmark = pytest.mark.services


def aws(tag: str) -> str:
    """An obviously fake AWS access key id that still has the detected shape (AKIA + 16)."""
    return "AKIA" + (tag.upper() + "Q7RZ2MXPL9TKW3B4N8VC")[:16]


def github(tag: str) -> str:
    """An obviously fake GitHub token with the detected shape (ghp_ + 36)."""
    return "ghp_" + (tag + "4f9c2A7bX1yZ0qW3eR5tY8uI6oP2aS4dF7gH")[:36]


# One secret per place, so a leak names its path. Bare ones are caught by shape; the header token,
# the URL password and the memory value only in their context (Bearer, URL, credential key).
PLANTED = {
    "input_value": aws("inval"),
    "input_key": aws("inkey"),
    "input_nested": github("nested"),
    "input_json_string": aws("injson"),
    "input_header": "q8Zr4Vx9Lm2Np7Kt5Wb3Hc6Jd1",
    "read_path": github("readpath"),
    "command": "S3cr3tFakePassw0rd",
    "document_text": aws("doctext"),
    "document_title": github("doctitle"),
    "document_content": aws("doccont"),
    "nested_document": aws("nestdoc"),
    "search_result": github("search"),
    "citation": aws("cite"),
    "mcp_input": aws("mcpin"),
    "mcp_result": github("mcpresult"),
    "offloaded_output": aws("offload"),
    "model": github("model"),
    "idempotency_key": aws("idem"),
    "focus": aws("focus"),
    "memory_key": aws("memkey"),
    "memory_value": github("memvalue"),
    "memory_keyed_value": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vLm3NpW",
    "error_field": aws("errfield"),
    "error_block_type": aws("errtype"),
    "error_tool_use_id": github("errid"),
    # only Kingfisher's catalog knows this format; the next two only by their position (issue 9)
    "kingfisher_only": "sk-or-v1-" + "5a17c0de" * 8,
    "word_password": "hunter2",
    "okta_token": "00QCjAl4MlV-WPXM-7fhhKZq0vBzC2eRt9nL3xYdP1",
}


class Service:
    """The API with a fake Messages API behind the summarizer, and everything it can leave behind."""

    def __init__(self, client: TestClient, res: Resources, auth: dict[str, str], sent: list) -> None:
        self.client, self.res, self.auth, self.sent = client, res, auth, sent
        self.seen: list[str] = []  # every response body, error bodies included

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**self.auth, **kwargs.pop("headers", {})}
        r = self.client.request(method, path, headers=headers, **kwargs)
        self.seen.append(r.text)
        return r


@pytest.fixture
def messages_api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(default=reply("## Task\nShip it.\n\n## Next planned action\nRe-run.")) as server:
        yield server


def planting_settings(
    tmp_path: Path, database_url: str, redis_url: str, messages_api: FakeMessagesAPI, **kw: Any
) -> Settings:
    """A service that compacts at once, offloads from 2,000 tokens and summarizes through the
    stand-in Messages API: every place a planted secret could reach gets written."""
    return make_settings(
        tmp_path,
        database_url,
        redis_url,
        idle_seconds=0.0,
        offload_tokens=2_000,
        summarizer="anthropic",
        anthropic_api_key="sk-ant-test-key-not-a-secret",
        anthropic_base_url=messages_api.base_url,
        anthropic_max_retries=0,
        **kw,
    )


@pytest.fixture
def service(
    tmp_path: Path, database_url: str, redis_url: str, messages_api: FakeMessagesAPI
) -> Iterator[Service]:
    settings = planting_settings(tmp_path, database_url, redis_url, messages_api)
    with open_app(settings, raise_server_exceptions=True) as api:
        yield Service(api.client, api.res, api.auth, api.enqueued)


def _document(data: str, title: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": data},
    }
    return doc | ({"title": title} if title else {})


def _tool_unit(n: int, tool_input: dict[str, Any], result: Any, name: str = "Bash") -> list[dict[str, Any]]:
    tid = f"toolu_{n:04d}"
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tid, "name": name, "input": tool_input}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": result}]},
    ]


def _conversation() -> list[dict[str, Any]]:
    """A task with documents and a search result, then tool loops hiding secrets in every field."""
    p = PLANTED
    task = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Fix the deploy; the docs and the search hit are attached."},
            _document(f"runbook: key {p['document_text']}", title=f"notes {p['document_title']}"),
            {
                "type": "document",
                "source": {
                    "type": "content",
                    "content": [{"type": "text", "text": f"id {p['document_content']}"}],
                },
            },
            {
                "type": "search_result",
                "source": "https://wiki.example/deploy",
                "title": "deploy",
                "content": [{"type": "text", "text": f"token {p['search_result']}"}],
            },
        ],
    }
    big_output = "\n".join(f"{i:05d} build step ok" for i in range(3_000)) + f"\nkey={p['offloaded_output']}"
    cited = {
        "role": "assistant",
        "content": [
            {
                "type": "text",
                "text": "The runbook names the key.",
                "citations": [
                    {
                        "type": "char_location",
                        "cited_text": f"key {p['citation']}",
                        "document_index": 1,
                        "document_title": None,
                        "start_char_index": 0,
                        "end_char_index": 10,
                    }
                ],
            }
        ],
    }
    mcp = {
        "role": "assistant",
        "content": [
            {
                "type": "mcp_tool_use",
                "id": "mcptoolu_0001",
                "name": "lookup",
                "server_name": "vault",
                "input": {"query": p["mcp_input"]},
            },
            {
                "type": "mcp_tool_result",
                "tool_use_id": "mcptoolu_0001",
                "is_error": False,
                "content": [{"type": "text", "text": f"found {p['mcp_result']}"}],
            },
        ],
    }
    tool_input = {
        "command": f"psql postgresql://app:{p['command']}@db.internal:5432/prod -c 'select 1'",
        "env": {"AWS": [{"id": p["input_value"]}], p["input_key"]: "prod"},
        "deep": [[{"x": [p["input_nested"]]}]],
        "payload": json.dumps({"note": "creds", "key": p["input_json_string"]}),
        "headers": {"Authorization": f"Bearer {p['input_header']}"},
        "db": f"mysql -h db.internal mysql://root:{p['word_password']}@db.internal/app",
        "okta": f"curl -H 'Authorization: SSWS {p['okta_token']}' https://acme.okta.com/api/v1/users",
    }
    return [
        task,
        *_tool_unit(
            1,
            tool_input,
            [
                {"type": "text", "text": f"ok; the router answered for {p['kingfisher_only']} twice"},
                _document(f"copy {p['nested_document']}"),
            ],
        ),
        *_tool_unit(2, {"file_path": f"/srv/cfg/{p['read_path']}/deploy.log"}, big_output, name="Read"),
        cited,
        mcp,
        {"role": "user", "content": "Carry on."},
        *[
            m
            for n in range(3, 12)
            for m in _tool_unit(n, {"command": f"make step{n}"}, f"step {n} done\n" * 40)
        ],
    ]


def _database_dump(engine: Engine) -> str:
    """Every row of every table as text; file payloads decompressed."""
    out: list[str] = []
    with read_tx(engine) as conn:
        for table in SQLModel.metadata.sorted_tables:
            for row in conn.execute(select(table)).all():
                out.extend(_cell(v) for v in row)
    return "\n".join(out)


def _cell(value: Any) -> str:
    if isinstance(value, bytes):
        try:
            return decompress(value)
        except Exception:  # not zstd: an opaque column
            return value.decode("latin-1")
    return str(value)


def _redis_dump(url: str, prefix: str) -> str:
    """Every key under the test's prefix and its value, whatever the type."""
    client = redis.Redis.from_url(url)
    out: list[str] = []
    for key in client.scan_iter(f"{prefix}*"):
        kind = client.type(key).decode()
        value: Any = {
            "string": lambda k: client.get(k),
            "hash": lambda k: client.hgetall(k),
            "list": lambda k: client.lrange(k, 0, -1),
            "set": lambda k: client.smembers(k),
            "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
        }.get(kind, lambda k: b"")(key)
        out += [key.decode(errors="replace"), repr(value)]
    client.close()
    return "\n".join(out)


def _plant_everything(svc: Service) -> None:
    p = PLANTED
    base = "/v1/sessions/s"
    r = svc.call(
        "POST",
        f"{base}/turns",
        json={"messages": _conversation(), "model": f"my-model {p['model']}", "context_window": 200_000},
        headers={"Idempotency-Key": f"turns-{p['idempotency_key']}"},
    )
    assert r.status_code == 200, r.text
    items = [
        {"key": f"deploy key {p['memory_key']}", "value": f"use {p['memory_value']}"},
        {"key": "aws_secret_access_key", "value": p["memory_keyed_value"]},
    ]
    assert svc.call("PUT", f"{base}/memory", json={"items": items}).status_code == 200
    r = svc.call("POST", f"{base}/compact", json={"focus": f"keep the deploy facts; key {p['focus']}"})
    assert r.status_code == 202


def _refused_requests(svc: Service) -> None:
    """Bad requests that quote their offending part; each is a 4xx problem."""
    p, url = PLANTED, "/v1/sessions/s/turns"
    bad = [
        {"messages": [{"role": "user", "content": "x"}], p["error_field"]: 1},
        {"messages": [{"role": "user", "content": [{"type": p["error_block_type"], "text": "x"}]}]},
        {
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": p["error_tool_use_id"]}]}
            ]
        },
    ]
    for body in bad:
        r = svc.call("POST", url, json=body)
        assert 400 <= r.status_code < 500 and r.headers["content-type"] == "application/problem+json"


def _read_everything(svc: Service) -> None:
    base = "/v1/sessions/s"
    for path in ("/prompt", "", "/memory", "/files"):
        assert svc.call("GET", f"{base}{path}").status_code == 200
    for f in json.loads(svc.seen[-1])["files"]:
        assert svc.call("GET", f"{base}/files/{f['ref']}").status_code == 200


def test_planted_secrets_appear_nowhere(
    service: Service, messages_api: FakeMessagesAPI, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Secrets in tool inputs (values, keys, nested, JSON strings, paths), documents, search results,
    citations, MCP blocks, offloaded output, model, Idempotency-Key, /compact focus, memory and
    refused requests are in no DB row, Redis key or value, file, log line, summarizer request or response."""
    svc, prefix = service, service.res.settings.redis_prefix
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        _plant_everything(svc)
        redis_before_job = _redis_dump(redis_url, prefix)
        tenant, pk, version = svc.sent[-1]
        assert jobs.compact(tenant, pk, version, svc.res) == "published"
        _refused_requests(svc)
        _read_everything(svc)
    places = {
        "database": _database_dump(svc.res.engine),
        "redis": redis_before_job + _redis_dump(redis_url, prefix),
        "responses": "\n".join(svc.seen),
        "logs": repr(logs) + caplog.text,
        "summarizer": "\n".join(json.dumps(r.body) for r in messages_api.requests),
    }
    assert messages_api.requests, "the summarizer was not called: nothing was tested there"
    assert '"kind":"offload"' in places["responses"].replace(" ", "")
    leaks = [
        (where, name) for name, secret in PLANTED.items() for where, text in places.items() if secret in text
    ]
    assert leaks == []
    assert "[REDACTED:" in places["database"]


def test_a_memory_item_under_a_redacted_key_is_deleted_by_its_original_key(service: Service) -> None:
    """DELETE ?key= redacts the key the way PUT stored it, so the agent can name what it wrote."""
    svc, key = service, f"deploy key {PLANTED['memory_key']}"
    assert svc.call(
        "POST", "/v1/sessions/m/turns", json={"messages": [{"role": "user", "content": "hi"}]}
    ).is_success
    stored = svc.call("PUT", "/v1/sessions/m/memory", json={"items": [{"key": key, "value": "v"}]}).json()
    assert [i["key"] for i in stored["items"]] != [key] and len(stored["items"]) == 1
    after = svc.call("DELETE", "/v1/sessions/m/memory", params={"key": key}).json()
    assert after["items"] == []

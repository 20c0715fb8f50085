"""Answer an SDK's HTTP requests where they leave the SDK: urllib3's connection pool (the transport
under the OpenAPI-generated clients of Kubernetes and Daytona) and httpx's transport (E2B).

Everything above it is the installed SDK's own code: its methods, argument validation, URL
building, request serialisation and response deserialisation into its models. The answers are
made with the SDK's own model classes; an unrouted request is recorded and answered 404, so a
wrong method or path fails the test.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

Handler = Callable[..., tuple]  # (status, JSON-able or bytes[, headers])
JSON = {"Content-Type": "application/json"}


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    body: object  # parsed JSON, else the raw bytes
    headers: dict[str, str] = field(default_factory=dict)

    def form(self) -> dict[str, bytes]:
        """A multipart/form-data body as {field name: content}."""
        from email.parser import BytesParser

        head = f"Content-Type: {self.headers['content-type']}\r\n\r\n".encode()
        msg = BytesParser().parsebytes(head + self.body)
        return {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                for p in msg.get_payload()}  # fmt: skip


@dataclass
class HTTPService:
    routes: list[tuple[str, re.Pattern, Handler]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    unrouted: list[Call] = field(default_factory=list)

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, re.compile(pattern + "$"), handler))

    def answer(self, method: str, url: str, body, headers=None) -> tuple[int, bytes, dict]:
        parts = urlsplit(url)
        if isinstance(body, str):
            body = body.encode()
        try:
            body = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError):
            pass
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        call = Call(method.upper(), parts.path, parse_qs(parts.query), body, headers)
        self.calls.append(call)
        for m, pat, handler in self.routes:
            match = pat.match(parts.path)
            if m == call.method and match:
                status, payload, *extra = handler(call, *match.groups())
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                return status, data, (extra[0] if extra else JSON)
        self.unrouted.append(call)
        return 404, b'{"message": "not routed"}', JSON

    def made(self, method: str, pattern: str) -> list[Call]:
        pat = re.compile(pattern + "$")
        return [c for c in self.calls if c.method == method and pat.match(c.path)]

    def patch_urllib3(self, monkeypatch) -> None:
        import urllib3

        def urlopen(pool, method, url, body=None, headers=None, **kw):
            full = url if url.startswith("http") else f"{pool.scheme}://{pool.host}{url}"
            status, data, head = self.answer(method, full, body, headers)
            return urllib3.HTTPResponse(
                body=io.BytesIO(data), status=status, headers=head,
                preload_content=kw.get("preload_content", True), request_method=method,
            )  # fmt: skip

        monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "urlopen", urlopen)

    def patch_httpx(self, monkeypatch) -> None:
        import httpx

        def handle(transport, request: httpx.Request) -> httpx.Response:
            status, data, head = self.answer(
                request.method, str(request.url), request.read(), request.headers
            )
            return httpx.Response(status, content=data, headers=head)

        monkeypatch.setattr(httpx.HTTPTransport, "handle_request", handle)

    def execute_sync(self, request):
        """A pyqwest transport (E2B's HTTP layer, under its httpx and Connect RPC clients)."""
        from pyqwest import Headers, SyncResponse

        body = request.content
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = b"".join(body)
        status, data, head = self.answer(
            request.method, str(request.url), body, dict(request.headers.items())
        )
        return SyncResponse(status=status, headers=Headers(head), content=data)

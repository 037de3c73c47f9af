"""Confluent Schema Registry's REST API as a client: the calls Connect's converters (klog.connect) and
`klog consume -s avro` (klog.client.deserializers) make. Standard library only (urllib), imported where
a registry is named."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

from klog.errors import KlogError

ANSWER_MAX_BYTES = 16 << 20  # a registry's answer (a schema and its metadata) larger than this is refused


class RegistryAnswerError(KlogError):
    """The registry answered with an error status below 500 (its message and error code kept)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Schema Registry: {message} (HTTP {status})")
        self.status = status
        self.message = message


class RegistryUnreachableError(KlogError):
    """No URL of the registry answered (or every one failed with a 5xx)."""


class RegistryClient:
    """Each URL of `urls` in turn until one answers (schema.registry.url's list). `auth` is
    basic.auth.user.info (user:password); a URL's own user:password@ is used when `auth` is None."""

    CONTENT = "application/vnd.schemaregistry.v1+json"

    def __init__(self, urls: list[str], auth: str | None = None, timeout_s: float = 30.0) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.auth = auth
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer to one request: each URL in turn until one answers, each within timeout_s in all
        (a server that drips its answer is given up on), in ANSWER_MAX_BYTES; a redirect is not followed
        (urllib sent the Authorization header on to any host it was sent to)."""
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        failures = []
        for base in self.urls:
            url, auth = with_userinfo(base + path, self.auth)
            base = with_userinfo(base, None)[0]  # (what a message names: no password)
            request = urllib.request.Request(url, data=data, method=method,
                                             headers={"Content-Type": self.CONTENT, "Accept": self.CONTENT})
            if auth is not None:
                request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
            try:
                status, message, answer = self._exchange(request)
            except (OSError, ValueError) as e:
                failures.append(f"{base}: {getattr(e, 'reason', None) or e}")
                continue
            if status is None:
                try:
                    return json.loads(answer or b"null")
                except ValueError as e:
                    failures.append(f"{base}: an answer that is not JSON ({e})")
                    continue
            if status >= 500 or 300 <= status < 400:
                failures.append(f"{base}: {message}")
                continue
            raise RegistryAnswerError(status, message)
        raise RegistryUnreachableError(f"no Schema Registry answered ({'; '.join(failures)})")

    def _exchange(self, request: Any) -> tuple[int | None, str, bytes]:
        """(None, "", body) for a 2xx answer, else (status, its message, b""); within timeout_s in all:
        urllib's timeout bounds each read, not the answer (a thread does, left to its own timeout)."""
        outcome: list[Any] = []
        worker = threading.Thread(target=_exchange, args=(request, self.timeout_s, outcome), daemon=True,
                                  name="klog-registry-call")
        worker.start()
        worker.join(self.timeout_s)
        if not outcome:
            raise TimeoutError(f"no whole answer within {self.timeout_s:g} s")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]


def _exchange(request: Any, timeout_s: float, outcome: list) -> None:
    import urllib.error
    import urllib.request

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:  # noqa: ANN401
            return None

    try:
        with urllib.request.build_opener(NoRedirects).open(request, timeout=timeout_s) as response:
            outcome.append((None, "", _bounded(response)))
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400:
            message = (f"{e.code} {e.reason}, to {e.headers.get('Location', '?')}: klog does not follow a Schema "
                       "Registry's redirects (give the URL it names)")
        else:
            message = _error_message(e)
        outcome.append((e.code, message, b""))
    except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
        outcome.append(e)


def _bounded(response: Any) -> bytes:
    body = response.read(ANSWER_MAX_BYTES + 1)
    if len(body) > ANSWER_MAX_BYTES:
        raise ValueError(f"an answer larger than {ANSWER_MAX_BYTES >> 20} MiB")
    return body


def _error_message(e: Any) -> str:
    try:
        doc = json.loads(_bounded(e))
        return f"{doc['message']} (error code {doc['error_code']})"
    except (ValueError, KeyError, TypeError, OSError):
        return f"{e.code} {e.reason}"


def with_userinfo(url: str, auth: str | None) -> tuple[str, str | None]:
    """The URL without its user:password@ part, and the credentials to send (basic.auth.user.info, or
    those of the URL when the source is URL)."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None:
        return url, auth
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    bare = urlunsplit(parts._replace(netloc=netloc))
    return bare, auth if auth is not None else f"{unquote(parts.username)}:{unquote(parts.password or '')}"

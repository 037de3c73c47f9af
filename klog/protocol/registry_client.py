"""Confluent Schema Registry's REST API as a client: the calls Connect's converters (klog.connect) and
`klog consume -s avro` (klog.client.deserializers) make. Standard library only (urllib), imported where
a registry is named."""

from __future__ import annotations

import base64
import json
from typing import Any

from klog.errors import KlogError


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
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        failures = []
        for base in self.urls:
            url, auth = with_userinfo(base + path, self.auth)
            request = urllib.request.Request(url, data=data, method=method,
                                             headers={"Content-Type": self.CONTENT, "Accept": self.CONTENT})
            if auth is not None:
                request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read() or b"null")
            except urllib.error.HTTPError as e:
                message = _error_message(e)
                if e.code >= 500:
                    failures.append(f"{base}: {message}")
                    continue
                raise RegistryAnswerError(e.code, message) from None
            except (OSError, ValueError) as e:
                failures.append(f"{base}: {getattr(e, 'reason', None) or e}")
        raise RegistryUnreachableError(f"no Schema Registry answered ({'; '.join(failures)})")


def _error_message(e: Any) -> str:
    try:
        doc = json.loads(e.read())
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

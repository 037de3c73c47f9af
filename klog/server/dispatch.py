"""The API registry: api key -> (handler, min version, max version). ApiVersions answers from it,
so the server advertises exactly what it implements.

A handler is `async fn(ctx: RequestContext, request) -> response | None`: `request` and the
response are kio dataclasses of the request's version (`None`: send nothing, as for acks=0
produce); a handler may also return a framing.RawBody whose bytes go out as they are (fetch's
zero-copy path). This package's handler modules register with @register; groups.py exports
`GROUP_HANDLERS` (the same shape); group_runtime.py the `GroupCoordinator` the server shares between
connections.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from klog.protocol.apis import API_VERSIONS
from klog.protocol.framing import RawBody, encode_body
from klog.protocol.kafka import NO_THROTTLE
from klog.server.context import RequestContext

HandlerFn = Callable[[RequestContext, Any], Awaitable[Any]]


class Handler(NamedTuple):
    fn: HandlerFn
    min_version: int
    max_version: int


HANDLERS: dict[int, Handler] = {}
_generation = 0  # bumped whenever an API is registered: the encoded ApiVersions answers depend on the ranges


def register(api_key: int, min_version: int, max_version: int) -> Callable[[HandlerFn], HandlerFn]:
    """Decorator for the handlers of this package's modules (collected by load_handlers)."""
    def wrap(fn: HandlerFn) -> HandlerFn:
        global _generation
        HANDLERS[api_key] = Handler(fn, min_version, max_version)
        _generation += 1
        return fn

    return wrap


def supports(api_key: int, api_version: int) -> bool:
    found = HANDLERS.get(api_key)
    return found is not None and found.min_version <= api_version <= found.max_version


def accepted(api_key: int) -> str:
    """The versions of `api_key` this server takes, for a log line ("v0-v11", "none")."""
    found = HANDLERS.get(api_key)
    return "none of its versions" if found is None else f"v{found.min_version}-v{found.max_version}"


def _api_versions_module(version: int):  # noqa: ANN202 - a kio module
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    return load_payload_module(API_VERSIONS, version, EntityType.response)


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    """The ApiVersions response at `version` listing every registered API's range."""
    module = _api_versions_module(version)
    keys = tuple(module.ApiVersion(api_key=i16(k), min_version=i16(h.min_version), max_version=i16(h.max_version))
                 for k, h in sorted(HANDLERS.items()))
    if version == 0:
        return module.ApiVersionsResponse(error_code=error, api_keys=keys)
    return module.ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time=NO_THROTTLE)


_encoded: dict[tuple[int, tuple], tuple[type, bytes]] = {}  # (version, the ranges) -> the answer's type, body
_encoded_now: dict[tuple[int, int], tuple[type, bytes]] = {}  # (version, _generation) -> the same, per request


@register(API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, request: Any) -> Any:
    """Every client sends this first, on every connection: its body is encoded once per version
    (kio's writer takes ~0.4 ms for the ~70 ranges), then sent as bytes."""
    found = _encoded_now.get((ctx.api_version, _generation))
    if found is None:
        key = (ctx.api_version, tuple((k, h.min_version, h.max_version) for k, h in HANDLERS.items()))
        found = _encoded.get(key)
        if found is None:
            response = api_versions_response(ctx.api_version)
            found = _encoded[key] = (type(response), encode_body(response))
        _encoded_now[(ctx.api_version, _generation)] = found
    return RawBody(found[0], [found[1]])


def unsupported_api_versions() -> Any:
    """A too-new ApiVersions request: answered in v0 with UNSUPPORTED_VERSION and our ranges, so
    the client retries with a version we know (Kafka's rule)."""
    return api_versions_response(0, ErrorCode.unsupported_version)


_loaded = False


def load_handlers() -> dict[int, Handler]:
    """Import every handler module once (each registers itself) and merge the group APIs."""
    global _loaded, _generation
    if not _loaded:
        _loaded = True
        import importlib

        from klog.server.groups import GROUP_HANDLERS

        for name in ("metadata", "produce", "producers", "fetch", "offsets", "admin", "sasl", "acl_apis", "placement",
                     "transactions", "tokens"):
            importlib.import_module(f"klog.server.{name}")
        for key, (fn, lo, hi) in GROUP_HANDLERS.items():
            HANDLERS[key] = Handler(fn, lo, hi)
        _generation += 1
        from klog.server.group_guards import guard_group_apis, guard_group_lists

        guard_group_apis(HANDLERS)  # GROUP_AUTHORIZATION_FAILED under ACLs
        guard_group_lists(HANDLERS)
    return HANDLERS

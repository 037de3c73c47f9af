"""Where a cluster is: bootstrap servers plus Kafka client properties (-X), and named clusters.

Named clusters live in `<data dir>/clusters.json` beside the store config (klog.json):
{"prod": {"bootstrap.servers": "h1:9092,h2:9092", "security.protocol": "SASL_SSL", ...}}.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from klog.errors import KlogError, UsageError

if TYPE_CHECKING:
    from klog.client.interface import AnyStore

CLUSTERS_FILE = "clusters.json"
TIMEOUT_S_DEFAULT = 10.0  # how long a command waits for an unreachable cluster before failing


def timeout_s() -> float:
    """The bound on every wait for the cluster ($KLOG_CLUSTER_TIMEOUT seconds, default 10)."""
    text = os.environ.get("KLOG_CLUSTER_TIMEOUT")
    if not text:
        return TIMEOUT_S_DEFAULT
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"invalid KLOG_CLUSTER_TIMEOUT '{text}': use seconds") from None
    if value <= 0:
        raise UsageError(f"invalid KLOG_CLUSTER_TIMEOUT '{text}': use seconds") from None
    return value


@dataclass(frozen=True)
class ClusterTarget:
    bootstrap: str
    properties: dict[str, str] = field(default_factory=dict)
    name: str | None = None  # a named cluster's name, for messages

    def client_config(self, **extra: object) -> dict[str, object]:
        """librdkafka settings: ours first, the user's -X properties over them."""
        conf: dict[str, object] = {"bootstrap.servers": self.bootstrap}
        if "debug" not in self.properties:
            conf["log_level"] = 0  # librdkafka's own log lines would break "one line per error"
        conf.update(extra)
        conf.update(self.properties)
        return conf

    @property
    def label(self) -> str:
        return f"cluster '{self.name}' ({self.bootstrap})" if self.name else self.bootstrap


def all_refused(bootstrap: str, timeout: float = 0.5) -> bool:
    """Whether every bootstrap address refuses a TCP connection (nothing listens): an answer that
    will not change by waiting, unlike silence (a firewall, a busy broker) or a TLS/SASL problem."""
    import socket

    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return False
        except ConnectionRefusedError:
            continue
        except (OSError, ValueError):  # no answer, no route, unresolvable: not a refusal
            return False
    return True


def parse_properties(pairs: list[str] | None) -> dict[str, str]:
    """-X name=value Kafka client properties (values kept as typed)."""
    from klog.client.pairs import parse_pairs

    return parse_pairs(pairs, "-X", "name=value (a Kafka client property)", strip_values=False)


def check_bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    if not servers:
        raise UsageError("invalid --bootstrap-server '': use HOST:PORT[,HOST:PORT...]")
    for s in servers:
        host, colon, port = s.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"invalid --bootstrap-server '{text}': use HOST:PORT[,HOST:PORT...]")
    return ",".join(servers)


def clusters_path(data_dir: str) -> str:
    return os.path.join(data_dir, CLUSTERS_FILE)


def load_clusters(data_dir: str) -> dict[str, dict[str, str]]:
    path = clusters_path(data_dir)
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise KlogError(f"cannot read {path}: {e}") from None
    if not isinstance(doc, dict):
        raise KlogError(f"cannot read {path}: not a JSON object")
    return doc


def save_clusters(data_dir: str, clusters: dict[str, dict[str, str]]) -> None:
    os.makedirs(data_dir, exist_ok=True)
    path = clusters_path(data_dir)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(clusters, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def named_target(data_dir: str, name: str, extra: dict[str, str] | None = None) -> ClusterTarget:
    clusters = load_clusters(data_dir)
    if name not in clusters:
        known = ", ".join(sorted(clusters)) or "none; add one with 'klog clusters add'"
        raise UsageError(f"unknown cluster '{name}' (known: {known})")
    props = dict(clusters[name])
    bootstrap = props.pop("bootstrap.servers", "")
    props.update(extra or {})
    return ClusterTarget(bootstrap, props, name)


def resolve_target(data_dir: str | None, bootstrap: str | None, cluster: str | None,
                   properties: list[str] | None) -> ClusterTarget | None:
    """The cluster a command talks to, or None for the local store. --bootstrap-server wins over
    --cluster; -X properties apply to either (and are an error with neither)."""
    props = parse_properties(properties)
    if bootstrap:
        if cluster:
            raise UsageError("use --bootstrap-server or --cluster, not both")
        return ClusterTarget(check_bootstrap(bootstrap), props)
    if cluster:
        from klog.store.layout import default_data_dir

        return named_target(data_dir or default_data_dir(), cluster, props)
    if props:
        raise UsageError("-X sets a Kafka client property: it needs --bootstrap-server or --cluster")
    return None


def parse_endpoint(spec: str, data_dir: str | None, properties: list[str] | None) -> ClusterTarget | str:
    """A mirror's SRC or DEST: a cluster (kafka://HOST:PORT[,...], @NAME for a named cluster, or a bare
    HOST:PORT that is not an existing path) as a ClusterTarget, else the path of a local store."""
    props = parse_properties(properties)
    if spec.startswith("kafka://"):
        return ClusterTarget(check_bootstrap(spec[len("kafka://"):].rstrip("/")), props)
    if spec.startswith("@"):
        from klog.store.layout import default_data_dir

        return named_target(data_dir or default_data_dir(), spec[1:], props)
    if not os.path.exists(spec) and _looks_like_servers(spec):
        return ClusterTarget(check_bootstrap(spec), props)
    if props:
        raise UsageError(f"'{spec}' is a local store: Kafka client properties apply to clusters only")
    return spec


def open_endpoint(spec: str, data_dir: str | None, properties: list[str] | None, create: bool = True,
                  on_warning: Callable[[str], None] | None = None) -> AnyStore:
    """Open what parse_endpoint names: a local Store (created if `create`) or a cluster's RemoteStore
    (mirror's SRC and DEST, replay's --to-store)."""
    where = parse_endpoint(spec, data_dir, properties)
    if isinstance(where, str):
        from klog.client.store import Store

        return Store(where, create=create, on_warning=on_warning)
    from klog.client.remote.store import RemoteStore

    return RemoteStore(where, on_warning=on_warning)


def _looks_like_servers(spec: str) -> bool:
    import re

    return all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]:]+:\d{1,5}", s.strip()) for s in spec.split(","))

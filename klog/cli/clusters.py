"""`klog clusters add|list|remove`: named Kafka clusters (bootstrap servers + client properties)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt

app = typer.Typer(help="Name Kafka clusters for --cluster NAME (and @NAME in klog mirror).", no_args_is_help=True)

SECRET_WORDS = ("password", "secret", "key")  # properties shown as *** by list


def _dir(data_dir: str | None) -> str:
    import os

    from klog.cli.session import check_data_dir_given
    from klog.store.layout import default_data_dir

    check_data_dir_given(data_dir)  # '' once wrote the default store's clusters.json
    return os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))


@app.command()
def add(
    name: str,
    bootstrap_server: Annotated[str, typer.Option("--bootstrap-server", "-b", help="HOST:PORT[,HOST:PORT...]")],
    prop: Annotated[list[str] | None, typer.Option("--property", "-X", help="Kafka client property name=value "
                                                   "(security.protocol, sasl.*, ssl.*, client.id, ...).")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Name a cluster (stored in the store's clusters.json; replaces one of the same name)."""
    from klog.client.remote.target import check_bootstrap, load_clusters, parse_properties, save_clusters
    from klog.errors import UsageError

    if not name or name.startswith("@") or not name.isprintable():
        raise UsageError(f"invalid cluster name {name!r}")
    props = parse_properties(prop)
    path = _dir(data_dir)
    clusters = load_clusters(path)
    clusters[name] = {"bootstrap.servers": check_bootstrap(bootstrap_server), **props}
    save_clusters(path, clusters)
    print(f"Added cluster {name} ({clusters[name]['bootstrap.servers']})", file=sys.stderr)


@app.command("list")
def list_(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Named clusters and their settings (secrets hidden)."""
    from klog.client.remote.target import load_clusters

    clusters = load_clusters(_dir(data_dir))

    def shown(props: dict[str, str]) -> dict[str, str]:
        return {k: ("***" if any(w in k for w in SECRET_WORDS) else v) for k, v in props.items()}

    if as_json:
        for name, props in sorted(clusters.items()):
            print(json.dumps({"cluster": name, **shown(props)}))
        return
    from klog.cli.tables import print_table

    print_table(["CLUSTER", "BOOTSTRAP-SERVERS", "PROPERTIES"],
                [[name, props.get("bootstrap.servers", ""),
                  ",".join(f"{k}={v}" for k, v in shown(props).items() if k != "bootstrap.servers") or "-"]
                 for name, props in sorted(clusters.items())])


@app.command()
def remove(name: str, data_dir: DataDirOpt = None) -> None:
    """Forget a named cluster."""
    from klog.client.remote.target import load_clusters, save_clusters
    from klog.errors import UsageError

    path = _dir(data_dir)
    clusters = load_clusters(path)
    if name not in clusters:
        raise UsageError(f"unknown cluster '{name}'")
    del clusters[name]
    save_clusters(path, clusters)
    print(f"Removed cluster {name}", file=sys.stderr)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="clusters")

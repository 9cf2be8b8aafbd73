"""The ``pyfelix`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import trio

from pyfelix import __version__
from pyfelix.datastore.commands import CommandError, run_command
from pyfelix.datastore.etcd import EtcdConfig, EtcdError
from pyfelix.resources import load_paths
from pyfelix.validation import validate_loaded

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def cmd_validate(args: argparse.Namespace) -> int:
    """Load and validate manifests; print every problem, or a one-line summary."""
    result = load_paths(args.paths)
    problems = validate_loaded(result)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return EXIT_INVALID
    files = {item.source for item in result.resources}
    kinds = Counter(item.resource.KIND for item in result.resources)
    breakdown = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    print(
        f"valid: {len(result.resources)} resources in {len(files)} file(s)"
        + (f" ({breakdown})" if breakdown else "")
    )
    return EXIT_OK


def datastore_config(source: str | None) -> EtcdConfig:
    """``--datastore etcd://...``, else calico-node's ETCD_ENDPOINTS (and TLS variables)."""
    if source:
        return EtcdConfig.from_url(source)
    if os.environ.get("ETCD_ENDPOINTS"):
        return EtcdConfig.from_env()
    raise CommandError("no etcd given: use --datastore etcd://HOST:PORT or set ETCD_ENDPOINTS")


def cmd_datastore(args: argparse.Namespace) -> int:
    """calicoctl-like commands against the etcd datastore."""
    try:
        config = datastore_config(args.datastore)
        return trio.run(run_command, args, config, sys.stdout)
    except (CommandError, EtcdError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID


def _add_datastore_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    datastore = commands.add_parser(
        "datastore",
        help="apply, create, replace, delete, get or list resources in etcd (like calicoctl)",
    )
    datastore.add_argument(
        "--datastore", metavar="URL", help="etcd://HOST:PORT[,HOST:PORT] (default: ETCD_ENDPOINTS)"
    )
    datastore.set_defaults(handler=cmd_datastore)
    actions = datastore.add_subparsers(dest="datastore_action", required=True, metavar="ACTION")
    for name, help_text in (
        ("apply", "create or update the resources in FILE"),
        ("create", "create the resources in FILE; fail if any exists"),
        ("replace", "update the resources in FILE; fail if any is missing or changed"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("-f", "--filename", required=True, help="file, directory or -")
    delete = actions.add_parser("delete", help="delete resources (-f FILE, or KIND NAME...)")
    delete.add_argument("-f", "--filename")
    delete.add_argument("kind", nargs="?")
    delete.add_argument("names", nargs="*")
    delete.add_argument("-n", "--namespace", default="default")
    for name in ("get", "list"):
        action = actions.add_parser(name, help=f"{name} resources of a kind")
        action.add_argument("kind")
        if name == "get":
            action.add_argument("names", nargs="*")
        action.add_argument("-n", "--namespace", default="default")
        action.add_argument("-A", "--all-namespaces", action="store_true")
        action.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyfelix",
        description="A Calico-compatible per-node network policy agent.",
    )
    parser.add_argument("--version", action="version", version=f"pyfelix {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser(
        "validate",
        help="check manifests (files or directories) against Calico's v3 rules",
        description="Print every problem as 'file:line: Kind/namespace/name: field: message' "
        "and exit 1, or print a one-line summary and exit 0.",
    )
    validate.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    validate.set_defaults(handler=cmd_validate)
    _add_datastore_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

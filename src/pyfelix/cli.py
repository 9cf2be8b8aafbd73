"""The ``pyfelix`` command line."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pyfelix import __version__
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

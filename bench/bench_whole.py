"""Whole-process benchmark: ``pyfelix dry-run`` as a user runs it, on v3 manifests of Felix's
calc-graph benchmark shapes, against the floor of merely parsing the same files.

Run: .venv/bin/python bench/bench_whole.py [SHAPE ...] [--scale S] [--yaml] [--rounds N]
         [--baseline CHECKOUT]

Shapes (at --scale 1, Felix's sizes; the default --scale 0.1 is a tenth):
  tags      250,000 endpoints (200 local), 10,000 policies `has(tag-i)` admitting `has(tag-j)`
  tenants   100,000 namespaces with one pod and one isolating policy each (100 local)
  netsets   10,000 endpoints (200 local), 10,000 network sets with an `all()`-style policy each

For each shape the manifests are written once (JSON lists of 1,000 resources a file, or
multi-document YAML with --yaml) into a temporary directory; then, interleaved per round, the
floor (one process loading every file with json.load, or libyaml's safe loader) and
``pyfelix dry-run --hostname host-local --format json DIR > /dev/null``, each under
/usr/bin/time (wall seconds and peak RSS). The ratio to the floor is reported per round and for
the medians, as RESULTS.md records it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bytecode import compile_agent, compile_baseline

HOST = "host-local"
PER_FILE = 1000
V3 = "projectcalico.org/v3"

Doc = dict[str, Any]


def ip(i: int) -> str:
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


def endpoint(i: int, namespace: str, labels: dict[str, str], local: bool) -> Doc:
    node = HOST if local else f"host-{i % 1000}"
    return {
        "apiVersion": V3,
        "kind": "WorkloadEndpoint",
        "metadata": {"name": f"{node}-k8s-pod--{i}-eth0", "namespace": namespace, "labels": labels},
        "spec": {
            "orchestrator": "k8s",
            "node": node,
            "pod": f"pod-{i}",
            "endpoint": "eth0",
            "interfaceName": f"cali{i:011x}",
            "ipNetworks": [f"{ip(i)}/32"],
            "profiles": [f"kns.{namespace}"],
        },
    }


def namespace(name: str) -> Doc:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def global_policy(name: str, selector: str, source: str) -> Doc:
    return {
        "apiVersion": V3,
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "order": 1,
            "selector": selector,
            "types": ["Ingress", "Egress"],
            "ingress": [{"action": "Allow", "protocol": "TCP", "source": {"selector": source}}],
            "egress": [{"action": "Allow"}],
        },
    }


def tags(scale: float) -> Iterator[Doc]:
    endpoints, policies = int(250_000 * scale), max(int(10_000 * scale), 10)
    yield namespace("default")
    for i in range(policies):
        yield global_policy(f"tag-{i}", f"has(tag-{i})", f"has(tag-{(i + 1) % policies})")
    for i in range(endpoints):
        labels = {"app": f"app-{i % 100}", **{f"tag-{(i * k) % policies}": "" for k in (1, 7, 13)}}
        yield endpoint(i, "default", labels, i < 200)


def tenants(scale: float) -> Iterator[Doc]:
    count = int(100_000 * scale)
    for n in range(count):
        ns = f"tenant-{n}"
        yield namespace(ns)
        yield {
            "apiVersion": V3,
            "kind": "NetworkPolicy",
            "metadata": {"name": "isolate", "namespace": ns},
            "spec": {
                "selector": "all()",
                "types": ["Ingress"],
                "ingress": [{"action": "Allow", "source": {"selector": "all()"}}],
            },
        }
        yield endpoint(n, ns, {"app": f"app-{n % 10}"}, n < 100)


def netsets(scale: float) -> Iterator[Doc]:
    endpoints, sets = int(10_000 * scale), int(10_000 * scale)
    yield namespace("default")
    for i in range(sets):
        address = f"172.{16 + (i >> 16) % 16}.{(i >> 8) & 255}.{i & 255}/32"
        yield {
            "apiVersion": V3,
            "kind": "GlobalNetworkSet",
            "metadata": {"name": f"netset-{i}", "labels": {"netset": f"ns-{i}"}},
            "spec": {"nets": [address]},
        }
        yield global_policy(f"netset-{i}", "all()", f'netset == "ns-{i}"')
    for i in range(endpoints):
        yield endpoint(i, "default", {"app": f"app-{i % 100}"}, i < 200)


SHAPES = {"tags": tags, "tenants": tenants, "netsets": netsets}


def write(docs: Iterator[Doc], directory: Path, as_yaml: bool) -> int:
    """The documents in files of PER_FILE; returns how many documents were written."""
    count = files = 0
    batch: list[Doc] = []

    def flush() -> None:
        path = directory / f"{files:05d}.{'yaml' if as_yaml else 'json'}"
        path.write_text(
            yaml.safe_dump_all(batch, sort_keys=False) if as_yaml else json.dumps(batch)
        )

    for doc in docs:
        batch.append(doc)
        count += 1
        if len(batch) == PER_FILE:
            flush()
            files += 1
            batch = []
    if batch:
        flush()
    return count


FLOOR = """
import json, sys, pathlib, yaml
loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
for path in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    text = path.read_text()
    if path.suffix == ".json":
        json.loads(text)
    else:
        list(yaml.load_all(text, Loader=loader))
"""


def timed(
    argv: list[str], env: dict[str, str] | None = None, digests: set[str] | None = None
) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of a command under /usr/bin/time; its stdout is only
    hashed, into ``digests``."""
    result = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M", *argv],
        capture_output=True,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed:\n{result.stderr.decode()[-2000:]}")
    if digests is not None:
        digests.add(hashlib.sha256(result.stdout).hexdigest())
    seconds, kilobytes = result.stderr.decode().strip().splitlines()[-1].split()
    return float(seconds), float(kilobytes) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--yaml", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="another checkout to run beside this one")
    args = parser.parse_args()
    pyfelix = str(Path(sys.executable).with_name("pyfelix"))
    baseline_env = None
    compile_agent()
    if args.baseline is not None:
        baseline_env = dict(os.environ, PYTHONPATH=compile_baseline(args.baseline.resolve()))
    for shape in args.shapes:
        with tempfile.TemporaryDirectory(prefix=f"pfbench-{shape}-") as tmp:
            directory = Path(tmp)
            documents = write(SHAPES[shape](args.scale), directory, args.yaml)
            kind = "YAML" if args.yaml else "JSON"
            print(f"{shape} x{args.scale:g} ({kind}, {len(list(directory.iterdir()))} files):")
            floors, runs, baselines = [], [], []
            digests: set[str] = set()
            dry_run = ["dry-run", "--hostname", HOST, "--format", "json", tmp]
            for round_ in range(1, args.rounds + 1):
                floor = timed([sys.executable, "-c", FLOOR, tmp])
                run = timed([pyfelix, *dry_run], digests=digests)
                floors.append(floor)
                runs.append(run)
                line = (
                    f"  round {round_}: floor {floor[0]:.2f} s {floor[1]:.0f} MB; dry-run "
                    f"{run[0]:.2f} s {run[1]:.0f} MB ({run[0] / floor[0]:.1f}x the floor)"
                )
                if baseline_env is not None:
                    argv = [sys.executable, "-m", "pyfelix", *dry_run]
                    baseline = timed(argv, baseline_env, digests)
                    baselines.append(baseline)
                    line += f"; baseline {baseline[0]:.2f} s {baseline[1]:.0f} MB"
                print(line, flush=True)
            floor_s = statistics.median(f[0] for f in floors)
            run_s = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            print(
                f"  median: dry-run {run_s:.2f} s, peak RSS {rss:.0f} MB; floor {floor_s:.2f} s;"
                f" {run_s / floor_s:.1f}x ({documents} resources)"
            )
            if baselines:
                base_s = statistics.median(b[0] for b in baselines)
                same = "the same output" if len(digests) == 1 else "DIFFERENT outputs"
                ratio = run_s / base_s
                print(f"  baseline median {base_s:.2f} s (this code: {ratio:.2f}x); {same}")


if __name__ == "__main__":
    main()

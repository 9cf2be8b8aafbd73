"""The ``pyfelix`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pyfelix import __version__, collection
from pyfelix.attrs_cache import CACHE
from pyfelix.datastore import KUBERNETES_SCHEME, is_etcd, is_kubernetes
from pyfelix.datastore.prefetch import ListingPrefetch
from pyfelix.logs import screen_handler, set_severity
from pyfelix.resources.parse_cache import ParseCache
from pyfelix.resources.shared_parse import ParsePrefetch

if TYPE_CHECKING:
    from pyfelix.datastore.etcd import EtcdConfig
    from pyfelix.datastore.prefetch import KeyedDigest
    from pyfelix.dryrun import InputTally
    from pyfelix.errors import Problem
    from pyfelix.resources import Resource
    from pyfelix.resources.loader import Digest, DirectDecoder, LoadResult, Located

# Only what `pyfelix run` needs before it forks its first read's child is imported here (the
# loader, 0.06 s); each command imports the stages it runs.


def default_hostname() -> str:
    """As calico-node finds it: NODENAME, then FELIX_FELIXHOSTNAME, then the host name."""
    return (
        os.environ.get("NODENAME") or os.environ.get("FELIX_FELIXHOSTNAME") or socket.gethostname()
    )


#: Above this many nodes to compute, plan says how long that may take.
MANY_NODES = 20
EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def no_resources(sources: Sequence[str | Path]) -> str:
    """What an input without a single resource is told (an empty file, directory or List)."""
    return f"no resources found in {' '.join(map(str, sources)) or 'the input'}"


def cmd_validate(args: argparse.Namespace) -> int:
    """Load and validate manifests; print every problem, or a one-line summary."""
    from pyfelix.resources import load_paths
    from pyfelix.resources.skipped import skipped_line
    from pyfelix.validation import validate_loaded

    result = load_paths(args.paths)
    counted = skipped_line(result.skipped)
    if counted is not None:
        print(counted, file=sys.stderr)
    problems = validate_loaded(result)
    if problems:
        return _refuse(problems)
    if not (result.resources or result.direct):
        print(no_resources(args.paths), file=sys.stderr)
        return EXIT_INVALID
    from pyfelix.validation.surprises import surprises

    loaded = [item.resource for item in result.resources]
    for line in [*refused_settings(loaded), *surprises(loaded)]:
        print(line, file=sys.stderr)
    files = {item.source for item in result.resources}
    kinds = Counter(item.resource.shown_kind() for item in result.resources)
    breakdown = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    print(
        f"valid: {len(result.resources)} resources in {len(files)} file(s)"
        + (f" ({breakdown})" if breakdown else "")
    )
    return EXIT_OK


async def load_from_etcd(config: EtcdConfig) -> LoadResult:
    """Every resource in etcd, as the loader would give it from files."""
    from pyfelix.datastore.etcd import EtcdClient
    from pyfelix.datastore.layout import WATCH_PREFIX, decode
    from pyfelix.errors import ManifestError, Problem
    from pyfelix.resources.loader import LoadResult, Located

    async with EtcdClient(config) as client:
        kvs, _ = await client.list_all(WATCH_PREFIX)
    located, problems = [], []
    for kv in kvs:
        try:
            resource = decode(kv.key, kv.value, kv.mod_revision)
        except ManifestError as exc:
            problems.extend(exc.problems or [Problem(kv.key, str(exc))])
            continue
        if resource is not None:
            located.append(Located(resource, kv.key, None))
    return LoadResult(tuple(located), tuple(problems))


def _load_etcd(url: str) -> LoadResult:
    """What ``load_from_etcd`` gives; raises ValueError for a bad URL or an etcd failure."""
    import trio

    from pyfelix.datastore.etcd import EtcdConfig, EtcdError

    try:
        return trio.run(load_from_etcd, EtcdConfig.from_url(url))
    except EtcdError as exc:
        raise ValueError(str(exc)) from exc


async def load_from_kubernetes(source: str, direct: DirectDecoder | None = None) -> LoadResult:
    """Every object of the kinds Felix's syncer watches on the Kubernetes API, as the loader
    would give them from a dump, ``direct`` taking what it takes as the loader's does (raises
    KubeError)."""
    import trio

    from pyfelix.agent import kube_config
    from pyfelix.datastore.kubernetes import KubeClient, KubeNotFound
    from pyfelix.resources.loader import Direct, LoadResult, Located
    from pyfelix.resources.meta import load_document
    from pyfelix.syncer.kubernetes import (
        listed_document,
        object_source,
        page_reader,
        watched_kinds,
    )

    kinds = watched_kinds()
    # Each kind's resources, direct entries and problems, in its listing's order.
    read: dict[Any, tuple[list[Located], list[Direct], list[Problem]]] = {
        watched: ([], [], []) for watched in kinds
    }
    async with KubeClient(kube_config(source)) as client:

        async def list_kind(watched: Any) -> None:
            located, taken, problems = read[watched]
            try:
                # Decoded a page at a time: the objects of a page are let go once read.
                reader = None if direct is None else page_reader(watched)
                async for objects, _ in client.pages(watched.path, read=reader):
                    for obj in objects:
                        name = object_source(watched, obj)
                        # A plain pod's fields, from the compiled reader, or the object.
                        doc = obj[1] if type(obj) is tuple else listed_document(watched, obj)
                        entry = None if direct is None else direct(doc)
                        if entry is not None:
                            taken.append(Direct(entry[0], entry[1], name, None))
                            continue
                        resource, found = load_document(doc, name)
                        problems.extend(found)
                        if resource is not None:
                            located.append(Located(resource, name, None))
            except KubeNotFound:
                pass  # not served here: Felix reads nothing of it either

        # Every kind at once (as the agent's syncer lists them): one round trip, not 21.
        async with trio.open_nursery() as nursery:
            for watched in kinds:
                nursery.start_soon(list_kind, watched)
    return LoadResult(
        tuple(item for watched in kinds for item in read[watched][0]),
        tuple(problem for watched in kinds for problem in read[watched][2]),
        direct=tuple(entry for watched in kinds for entry in read[watched][1]),
    )


def _load_kubernetes(source: str, direct: DirectDecoder | None) -> LoadResult:
    """What ``load_from_kubernetes`` gives; raises ValueError for an API that fails."""
    import trio

    from pyfelix.datastore.kubernetes import KubeError

    try:
        return trio.run(load_from_kubernetes, source, direct)
    except KubeError as exc:
        raise ValueError(str(exc)) from exc


def load_sources(
    sources: Sequence[str],
    strict: bool = True,
    refuse_to: TextIO | None = None,
    hostname: str = "",
    direct: DirectDecoder | None = None,
) -> LoadResult | int:
    """Manifest files and directories, or one etcd URL, validated (with ``hostname``'s
    settings); an exit code on failure, its problems printed to ``refuse_to`` (stdout by
    default); unless not ``strict``: then problems are reported on stderr, as treated as
    absent, and the load goes on."""
    from pyfelix.resources import load_paths
    from pyfelix.validation import validate_loaded

    remote = [s for s in sources if is_etcd(s) or is_kubernetes(s)]
    if remote and len(sources) > 1:
        print("an etcd or kubernetes:// datastore must be the only source", file=sys.stderr)
        return EXIT_USAGE
    try:
        if not remote:
            result = load_paths(sources, direct=direct)
        elif is_kubernetes(remote[0]):
            result = _load_kubernetes(remote[0], direct)
        else:
            result = _load_etcd(remote[0])
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    problems = validate_loaded(result, hostname)
    if problems and not strict:
        for problem in problems:
            print(f"treated as absent: {problem}", file=sys.stderr)
    elif problems:
        return _refuse(problems, refuse_to)
    return result


def cmd_dry_run(args: argparse.Namespace) -> int:
    """Load, validate, compute the node's dataplane once, print it. Whatever the user is
    told beside the view goes to stderr, so that stdout holds the view alone."""
    from pyfelix.dryrun import InputTally, compute, render_text, write_json

    tally = InputTally()
    # JSON is written as it is made: the long scripts are never held whole.
    pieces = args.format == "json"
    if not args.sources:
        # calicoctl's convention: DATASTORE_TYPE and KUBECONFIG (or the etcd variables).
        datastore_type = os.environ.get("DATASTORE_TYPE", "").lower()
        if datastore_type == "kubernetes":
            args.sources = [KUBERNETES_SCHEME]
        elif datastore_type == "etcdv3":
            from pyfelix.datastore.etcd import EtcdConfig

            args.sources = [EtcdConfig.env_url()]
        else:
            print(
                "dry-run: no source given (files, etcd://HOST:PORT, kubernetes://, or"
                " DATASTORE_TYPE=kubernetes|etcdv3)",
                file=sys.stderr,
            )
            return EXIT_USAGE
    if any(is_etcd(source) or is_kubernetes(source) for source in args.sources):
        from pyfelix.syncer.plain_namespaces import plain_entry

        loaded = load_sources(
            args.sources,
            strict=not args.skip_invalid,
            refuse_to=sys.stderr,
            hostname=args.hostname,
            direct=plain_entry,
        )
        if isinstance(loaded, int):
            return loaded
        tally.note(loaded)
        # Strict: every resource is valid (the input was refused otherwise); else the
        # pipeline's validation filter leaves the invalid ones out, as the agent's does.
        resources = (i.resource for i in loaded.resources)
        view, _ = compute(
            resources,
            args.hostname,
            validated=not args.skip_invalid,
            direct=loaded.direct,
            kube_ipvs=args.kube_proxy_ipvs,
            pieces=pieces,
        )
    else:
        dry_run = _dry_run_as_agent if args.skip_invalid else _dry_run_manifests
        computed = dry_run(args.sources, args.hostname, tally, args.kube_proxy_ipvs, pieces)
        if isinstance(computed, int):
            return computed
        view = computed
    if not tally.count:
        print(no_resources(args.sources), file=sys.stderr)
        return EXIT_INVALID
    for line in [
        *tally.messages(args.hostname),
        *refused_settings(tally.configurations),
        *tally.surprises(),
    ]:
        print(line, file=sys.stderr)
    if args.format == "json":
        sys.stdout.flush()
        write_json(view, sys.stdout.buffer)
    else:
        sys.stdout.write(render_text(view))
    return EXIT_OK


def _dry_run_manifests(
    sources: list[str],
    hostname: str,
    tally: InputTally,
    kube_ipvs: bool = False,
    pieces: bool = False,
) -> dict[str, Any] | int:
    """The dry-run's view of manifest files, or the exit code of refusing them. Plain
    endpoints and namespaces (most of a big cluster) go from their document straight to the
    model.

    When they are big enough, a child on the second core parses and validates each file,
    handing its documents on (plain endpoints as their checked fields; valid policies as
    their model values while this process is behind) while this process computes the files
    it has; what is computed is printed only once that validation found nothing."""
    from pyfelix.dryrun import compute_files
    from pyfelix.resources import load_paths
    from pyfelix.syncer.plain_namespaces import (
        plain_digest,
        plain_entry,
        plain_identity,
        plain_text_digest,
    )
    from pyfelix.syncer.plain_policies import policy_fields
    from pyfelix.validation.loading import BackgroundValidation

    validation = BackgroundValidation(
        list(sources),
        direct=plain_identity,
        hand_on=plain_digest,
        hostname=hostname,
        hand_on_text=plain_text_digest,
        hand_on_spare=policy_fields,
    )
    result: LoadResult | None = None
    try:
        if validation.pid:
            # The child parses and checks each file; this process computes it as it comes.
            trusted = partial(plain_entry, validate=False)
            loaded = tally.watch(validation.loaded(trusted, waiting=True))
            reload = partial(load_paths, sources, direct=plain_entry)
            view, _ = compute_files(
                loaded, hostname, reload=reload, kube_ipvs=kube_ipvs, pieces=pieces
            )
        else:
            result = load_paths(sources, direct=plain_entry)
            tally.note(result)
            view = _computed(result, result.resources, hostname, kube_ipvs, pieces)
        failure: Exception | None = None
    except Exception as exc:  # invalid input may break it: the verdict decides
        failure = exc
    problems = validation.problems(result)
    if problems:
        return _refuse(problems, sys.stderr)
    if failure is not None:
        raise failure
    return view


def _dry_run_as_agent(
    sources: list[str],
    hostname: str,
    tally: InputTally,
    kube_ipvs: bool = False,
    pieces: bool = False,
) -> dict[str, Any] | int:
    """The dry-run's view as ``pyfelix run`` would program it: every invalid resource is
    named on stderr and treated as absent by the pipeline's validation filter, as the
    agent's is (a document that does not load at all is absent too)."""
    from pyfelix.resources import load_paths
    from pyfelix.syncer.plain_namespaces import plain_entry
    from pyfelix.validation import validate_loaded

    result = load_paths(sources, direct=plain_entry)
    tally.note(result)
    problems = validate_loaded(result, hostname)
    for problem in problems:
        print(f"treated as absent: {problem}", file=sys.stderr)
    # Left out here, as the pipeline's validation filter would leave them out (each is
    # named once, above, with its file and line).
    return _computed(
        result, without_invalid(result, problems).resources, hostname, kube_ipvs, pieces
    )


def _computed(
    result: LoadResult,
    items: Iterable[Located],
    hostname: str,
    kube_ipvs: bool,
    pieces: bool,
) -> dict[str, Any]:
    """The view of a load's ``items`` (validated beforehand), its plain documents taken
    straight to the model."""
    from pyfelix.dryrun import compute

    resources = (item.resource for item in items)
    view, _ = compute(
        resources,
        hostname,
        validated=True,
        direct=result.direct,
        kube_ipvs=kube_ipvs,
        pieces=pieces,
    )
    return view


def load_as_agent(sources: Sequence[str]) -> LoadResult | int:
    """The input as the agent takes it, for the commands that compute nodes from it (explain,
    plan, diff): each invalid resource named on stderr and left out, plain endpoints and
    namespaces of manifests decoded straight to the model (``LoadResult.direct``), so that
    ``compute(..., validated=True, direct=...)`` takes it as the dry-run does. An input with
    no valid resource at all is an error (2: these commands' 1 is an answer)."""
    loaded = _load_as_agent(sources)
    if not isinstance(loaded, int) and not (loaded.resources or loaded.direct):
        print(no_resources(sources), file=sys.stderr)
        return EXIT_USAGE
    return loaded


def _load_as_agent(sources: Sequence[str]) -> LoadResult | int:
    from pyfelix.resources.loader import merge
    from pyfelix.syncer.plain_namespaces import (
        plain_digest,
        plain_entry,
        plain_identity,
        plain_text_digest,
    )
    from pyfelix.validation import validate_loaded
    from pyfelix.validation.loading import BackgroundValidation

    remote = any(is_etcd(source) or is_kubernetes(source) for source in sources)
    validation = (
        None
        if remote
        else BackgroundValidation(
            list(sources),
            direct=plain_identity,
            hand_on=plain_digest,
            hand_on_text=plain_text_digest,
        )
    )
    if validation is None or not validation.pid:
        loaded = load_sources(sources, refuse_to=sys.stderr, direct=plain_entry, strict=False)
        if isinstance(loaded, int):
            return loaded
        return without_invalid(loaded, validate_loaded(loaded))
    # Big manifests: a child on the other core parses and checks them, handing each file's
    # documents on, while this process decodes them trusting what the child checks.
    loaded = merge(validation.loaded(partial(plain_entry, validate=False)))
    problems = validation.problems()
    for problem in problems:
        print(f"treated as absent: {problem}", file=sys.stderr)
    return without_invalid(loaded, problems)


def without_invalid(result: LoadResult, problems: Iterable[Problem]) -> LoadResult:
    """``result`` without the resources ``problems`` name, each where it was read (a
    duplicate's problem names the copy the load already left out, not the one it kept)."""
    import attrs

    invalid = {(problem.resource, problem.source) for problem in problems}
    if not invalid:
        return result
    kept = tuple(
        item for item in result.resources if (item.resource.ident, item.source) not in invalid
    )
    direct = tuple(entry for entry in result.direct if (entry.ident, entry.source) not in invalid)
    return attrs.evolve(result, resources=kept, direct=direct)


def refused_settings(resources: Iterable[Resource]) -> list[str]:
    """What ``pyfelix run`` would refuse in these FelixConfigurations (config.support.UNSAFE),
    a line each, for ``validate`` and ``dry-run`` to say."""
    from pyfelix.config.support import unsafe
    from pyfelix.resources import FelixConfiguration

    lines: list[str] = []
    for resource in resources:
        if not isinstance(resource, FelixConfiguration):
            continue
        texts = resource.spec.felix_values()
        lines.extend(
            f"{resource.ident}: {why}; pyfelix run refuses this configuration"
            for why in unsafe(texts)
        )
    return lines


def _refuse(problems: Sequence[Problem], out: TextIO | None = None) -> int:
    """Every problem (on stdout, or ``out``), their count on stderr: the input is refused."""
    for problem in problems:
        print(problem, file=out)
    print(f"{len(problems)} problem(s) found", file=sys.stderr)
    return EXIT_INVALID


def cmd_run(args: argparse.Namespace) -> int:
    """The agent."""
    source = args.datastore or os.environ.get("PYFELIX_DATASTORE", "")
    if not source and os.environ.get("FELIX_DATASTORETYPE", "").lower() == "kubernetes":
        source = KUBERNETES_SCHEME  # the kubeconfig Felix would take
    if not source:
        from pyfelix.datastore.etcd import EtcdConfig

        # calico-node's ETCD_ENDPOINTS or Felix's FELIX_ETCD*: every endpoint, for failover.
        source = EtcdConfig.env_url()
    # The first read (a directory's parse, or etcd's listing) starts now, on the other core,
    # beside the imports below.
    prefetch: ParsePrefetch | ListingPrefetch | None = None
    cache = None
    if source and (args.dry_run or os.geteuid() == 0) and not is_kubernetes(source):
        if is_etcd(source):
            prefetch = ListingPrefetch(source, digest=_etcd_endpoint_checks)
        else:
            cache = ParseCache.for_datastore(Path(source), FIRST_READ)
            prefetch = ParsePrefetch(Path(source), digest=_endpoint_checks, cache=cache)
    try:
        return _run_agent(args, source, prefetch, cache)
    finally:
        if prefetch is not None:
            prefetch.close()


#: What the agent's first read keeps in its parse cache: documents, plain endpoints, pods,
#: namespaces and service accounts as the fields ``_endpoint_checks`` gives.
FIRST_READ = "first read: plain_digest"


def _endpoint_checks() -> Digest:
    """The checks of plain endpoints, pods, namespaces and service accounts, for the first
    read's child: imported there, they run on the core that parses, and this process only
    builds the model values."""
    from pyfelix.syncer.plain_namespaces import plain_digest

    return plain_digest


def _etcd_endpoint_checks() -> KeyedDigest:
    """The same, for the first etcd listing's child."""
    from pyfelix.syncer.plain_workloads import plain_fields_at

    return plain_fields_at


def _run_agent(
    args: argparse.Namespace,
    source: str,
    prefetch: ParsePrefetch | ListingPrefetch | None,
    cache: ParseCache | None = None,
) -> int:
    # The cyclic collector is paused from here, not only from the calc loop's start (which
    # resumes it at InSync, or after its start-up pause): the imports and the agent's set-up
    # build only long-lived objects, and collecting them cost 20-30 ms of every start.
    collection.pause_while_loading()
    import trio

    from pyfelix.agent import AgentOptions, run_agent

    if not logging.getLogger().handlers:  # as logging.basicConfig would
        logging.getLogger().addHandler(screen_handler())
    # Until the datastore's FelixConfiguration arrives, only the environment can say.
    set_severity(os.environ.get("FELIX_LOGSEVERITYSCREEN", "Info"))
    if not source:
        print("no datastore: use --datastore DIR|etcd://HOST:PORT", file=sys.stderr)
        return EXIT_USAGE
    if not args.dry_run and os.geteuid() != 0:
        print("pyfelix run programs the kernel and needs root (or use --dry-run)", file=sys.stderr)
        return EXIT_USAGE
    if is_etcd(source):
        from pyfelix.datastore.etcd import EtcdConfig, EtcdError

        try:
            EtcdConfig.from_url(source).ssl_context()  # a TLS file that cannot work: say which
        except EtcdError as exc:
            print(exc, file=sys.stderr)
            return EXIT_INVALID
    if is_kubernetes(source):
        from pyfelix.agent import kube_config
        from pyfelix.datastore.kubernetes import KubeConfigError

        try:
            kube_config(source).ssl_context()  # no kubeconfig, or unusable TLS files: say so
        except KubeConfigError as exc:
            print(exc, file=sys.stderr)
            return EXIT_INVALID
    options = AgentOptions(
        hostname=args.hostname,
        datastore=source,
        dry_run=args.dry_run,
        prefetch=prefetch if isinstance(prefetch, ParsePrefetch) else None,
        listing=prefetch if isinstance(prefetch, ListingPrefetch) else None,
        parse_cache=cache,
    )
    try:
        code: int = trio.run(run_agent, options)
    except KeyboardInterrupt:
        return EXIT_OK
    return code


def cmd_explain(args: argparse.Namespace) -> int:
    """Why a flow is allowed or denied: its first packet through the rules of the source's
    node and of the destination's, as they would be programmed. 0 when allowed, 1 when
    denied, 2 when the question names nothing in the input."""
    from pyfelix import jsontext
    from pyfelix.dryrun import compute_state
    from pyfelix.explain import (
        ExplainError,
        ask,
        endpoints_of,
        explain_flow,
        matrix_text,
        report_json,
        report_text,
    )

    loaded = load_as_agent(args.sources)
    if isinstance(loaded, int):
        return loaded
    resources = [item.resource for item in loaded.resources]
    endpoints = endpoints_of(resources, loaded.direct)
    try:
        places, questions = ask(
            endpoints,
            args.port,
            source=args.source,
            destination=args.destination,
            matrix=args.matrix,
        )
    except ExplainError as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    nodes = {p.node for q in questions.values() for p in (q.source, q.destination) if p.node}
    if not nodes:
        print("explain: no end of the flow is a workload of the input", file=sys.stderr)
        return EXIT_USAGE
    states, why = {}, {}
    for node in sorted(nodes):
        states[node], described = compute_state(
            resources, node, validated=True, direct=loaded.direct
        )
        why.update(described)
    answers = {key: explain_flow(q, states, why) for key, q in questions.items()}
    allowed = {key: all(s.verdict.allowed for s in sides) for key, sides in answers.items()}
    if args.matrix and args.format == "text":
        sys.stdout.write(matrix_text(places, allowed, args.port))
    elif args.format == "json":
        reports = [report_json(questions[key], sides) for key, sides in answers.items()]
        sys.stdout.flush()
        document = {"flows": reports} if args.matrix else reports[0]
        sys.stdout.buffer.write(jsontext.dumps_indented(document))
    else:
        ((key, sides),) = answers.items()
        sys.stdout.write(report_text(questions[key], sides))
    return EXIT_OK if all(allowed.values()) else EXIT_INVALID


def cmd_plan(args: argparse.Namespace) -> int:
    """What applying (or deleting) CHANGE, or enforcing the staged policies, would do: the
    flows whose verdict flips and each node's dataplane delta. 0 when nothing flips, 1 when
    something does, 2 on error."""
    from pyfelix import jsontext
    from pyfelix.explain import endpoints_of
    from pyfelix.plan import (
        change_steps,
        changed,
        compute_plans,
        direct_after,
        flips,
        node_delta,
        nodes_of,
    )
    from pyfelix.plan import report_json as plan_json
    from pyfelix.plan import report_text as plan_text
    from pyfelix.resources import KINDS

    loaded = load_as_agent(args.sources)
    if isinstance(loaded, int):
        return loaded
    before = [item.resource for item in loaded.resources]
    change: list[Any] = []
    if args.change:
        proposed = load_sources(args.change, refuse_to=sys.stderr)
        if isinstance(proposed, int):
            return proposed
        change = [item.resource for item in proposed.resources]
    elif not args.enforce_staged:
        print(
            "plan: give --change FILE (with --delete to delete), or --enforce-staged",
            file=sys.stderr,
        )
        return EXIT_USAGE
    steps = change_steps(
        before, change, delete=args.delete, enforce_staged=args.enforce_staged, classes=KINDS
    )
    after = changed(before, steps)
    direct = (loaded.direct, direct_after(loaded.direct, steps))
    endpoints_before = endpoints_of(before, direct[0])
    endpoints_after = endpoints_of(after, direct[1])
    nodes = args.hostname or nodes_of([*endpoints_before, *endpoints_after])
    if len(nodes) > MANY_NODES:
        print(
            f"plan: computing {len(nodes)} nodes, each about as long as its dry-run"
            " (--hostname NODE plans only the nodes named)",
            file=sys.stderr,
        )
    plans = compute_plans(before, steps, nodes, direct)
    flipped = flips(endpoints_before, endpoints_after, plans)
    deltas = [node_delta(plans[node]) for node in nodes]
    if args.format == "json":
        sys.stdout.flush()
        sys.stdout.buffer.write(jsontext.dumps_indented(plan_json(flipped, deltas)))
    else:
        sys.stdout.write(plan_text(flipped, deltas))
    return EXIT_INVALID if flipped else EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    """A node's ruleset (iptables-save, with ipset save appended, or nft list ruleset) against
    what pyfelix computes for the node. 0 when they match, 1 when they differ, 2 on error."""
    from pyfelix import jsontext
    from pyfelix.diff import RulesetError, compare, expected, parse_ruleset
    from pyfelix.diff import report_json as diff_json
    from pyfelix.diff import report_text as diff_text
    from pyfelix.dryrun import compute_state

    try:
        if args.ruleset == "-":
            text = sys.stdin.read()
        else:
            text = Path(args.ruleset).read_text(encoding="utf-8", errors="replace")
        have = parse_ruleset(text, args.ip_version)
    except (OSError, RulesetError) as exc:
        print(f"diff: {args.ruleset}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    loaded = load_as_agent(args.sources)
    if isinstance(loaded, int):
        return loaded
    resources = [item.resource for item in loaded.resources]
    state, _ = compute_state(resources, args.node, validated=True, direct=loaded.direct)
    state.kube_ipvs = args.kube_proxy_ipvs
    difference = compare(args.node, expected(state, have.form), have)
    if args.format == "json":
        sys.stdout.flush()
        sys.stdout.buffer.write(jsontext.dumps_indented(diff_json(difference)))
    else:
        sys.stdout.write(diff_text(difference, args.ruleset))
    return EXIT_OK if difference.same else EXIT_INVALID


def cmd_demo(args: argparse.Namespace) -> int:
    """The agent on a node of network namespaces, with a connectivity matrix."""
    from pyfelix.demo import READY_TIMEOUT, run_demo
    from pyfelix.resources import load_paths
    from pyfelix.validation import validate_loaded

    if os.geteuid() != 0:
        print("pyfelix demo creates network namespaces and needs root", file=sys.stderr)
        return EXIT_USAGE
    result = load_paths(args.sources)
    problems = validate_loaded(result)
    if problems:
        for problem in problems:
            print(problem)
        return EXIT_INVALID
    return run_demo(
        [item.resource for item in result.resources], ready_timeout=args.timeout or READY_TIMEOUT
    )


def cmd_pods(args: argparse.Namespace) -> int:
    """Pods for this node's workload endpoints, as the CNI plugin wires them."""
    from pyfelix.pods import pods_check, pods_down, pods_up

    if os.geteuid() != 0:
        print("pyfelix pods creates network namespaces and needs root", file=sys.stderr)
        return EXIT_USAGE
    # Pods must come down (and go up) even when some other resource is invalid.
    result = load_sources(args.sources, strict=False)
    if isinstance(result, int):
        return result
    action = {"up": pods_up, "down": pods_down, "check": pods_check}[args.action]
    resources = [item.resource for item in result.resources]
    return action(resources, args.hostname, args.prefix, sys.stdout)


def datastore_config(source: str | None) -> EtcdConfig:
    """``--datastore etcd://...``, else calico-node's ETCD_ENDPOINTS (and TLS variables)."""
    from pyfelix.datastore.commands import CommandError
    from pyfelix.datastore.etcd import EtcdConfig

    if source:
        return EtcdConfig.from_url(source)
    if EtcdConfig.env_endpoints():
        return EtcdConfig.from_env()
    raise CommandError("no etcd given: use --datastore etcd://HOST:PORT or set ETCD_ENDPOINTS")


def cmd_datastore(args: argparse.Namespace) -> int:
    """calicoctl-like commands against the etcd datastore."""
    import trio

    from pyfelix.datastore.commands import CommandError, run_command
    from pyfelix.datastore.etcd import EtcdError
    from pyfelix.datastore.kubernetes import KubeError

    kube = args.datastore if args.datastore and is_kubernetes(args.datastore) else ""
    if not args.datastore and os.environ.get("DATASTORE_TYPE", "").lower() == "kubernetes":
        kube = KUBERNETES_SCHEME  # calicoctl's convention, with KUBECONFIG
    try:
        if kube:
            from pyfelix.datastore.commands import run_kube_command

            code: int = trio.run(run_kube_command, args, kube, sys.stdout)
        else:
            config = datastore_config(args.datastore)
            code = trio.run(run_command, args, config, sys.stdout)
    except (CommandError, EtcdError, KubeError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return EXIT_INVALID
    return code


def _add_datastore_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    datastore = commands.add_parser(
        "datastore",
        help="apply, create, replace, delete, get or list resources in etcd (like calicoctl)",
    )
    datastore.add_argument(
        "--datastore",
        metavar="URL",
        help="etcd://HOST:PORT[,HOST:PORT] (default: ETCD_ENDPOINTS), or kubernetes:// (get and"
        " list; DATASTORE_TYPE=kubernetes with KUBECONFIG does the same)",
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


EPILOG = """examples:
  pyfelix validate manifests/
  kubectl get pods,namespaces,networkpolicies -A -o yaml | pyfelix dry-run --hostname node-1 -
  pyfelix dry-run --hostname node-1 kubernetes://     (KUBECONFIG, else in-cluster)
  pyfelix dry-run --hostname node-1 etcd://10.0.0.5:2379
  pyfelix run --datastore kubernetes://               (as root, on the node)
  pyfelix demo examples/                              (as root: real traffic in namespaces)

environment:
  FELIX_<PARAMETER>      any Felix parameter (e.g. FELIX_LOGSEVERITYSCREEN=Debug); it
                         overrides the FelixConfiguration resources
  FELIX_DATASTORETYPE    kubernetes or etcdv3, for `run` without --datastore
  DATASTORE_TYPE         kubernetes or etcdv3, for `dry-run` without a source (calicoctl's)
  KUBECONFIG, FELIX_KUBECONFIG
                         the Kubernetes API's configuration (else the in-cluster account)
  ETCD_ENDPOINTS, ETCD_CA_CERT_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE
                         etcd's addresses and TLS files
  NODENAME, FELIX_FELIXHOSTNAME
                         the node's name (default of --hostname; else the host name)
  PYFELIX_LOG_FORMAT     json: one JSON object a log line (default: Felix's line format)
  PYFELIX_STATE_DIR      where the pods' MTU file is written (default /var/lib/calico)

exit codes:
  0  done (validate: valid; run: stopped by a signal)
  1  invalid input, no resources found, or a fatal error
  2  usage error
  129  run: restart needed (configuration changed, SIGHUP), as Felix's
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pyfelix",
        description="A Calico-compatible per-node network policy agent.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    dry_run = commands.add_parser(
        "dry-run",
        help="compute and print a node's dataplane from manifests or etcd, then exit",
    )
    dry_run.add_argument(
        "sources",
        nargs="*",
        metavar="SRC",
        help="files, directories, etcd://URL or kubernetes:// (default: DATASTORE_TYPE's)",
    )
    dry_run.add_argument("--hostname", default=default_hostname(), help="the node to compute for")
    dry_run.add_argument("--format", choices=("text", "json"), default="text")
    dry_run.add_argument(
        "--skip-invalid",
        action="store_true",
        help="treat invalid resources as absent, as `pyfelix run` does (each named on stderr)",
    )
    dry_run.add_argument(
        "--kube-proxy-ipvs",
        action="store_true",
        help="render as on a node where kube-proxy runs in IPVS mode (kube-ipvs0 present),"
        " with Felix's IPVS chains and endpoint marks",
    )
    dry_run.set_defaults(handler=cmd_dry_run)
    run = commands.add_parser("run", help="run the agent")
    run.add_argument("--hostname", default=default_hostname())
    run.add_argument(
        "--datastore",
        metavar="SRC",
        help="manifest directory, etcd://HOST:PORT or kubernetes:// (the Kubernetes API)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print every dataplane message instead of programming",
    )
    run.set_defaults(handler=cmd_run)
    explain = commands.add_parser(
        "explain",
        help="why a flow is allowed or denied, from the rules the nodes would program",
        description="Trace a flow's first packet through the rules of the source's node and"
        " the destination's, as they would be programmed, and name what decides it: the"
        " policy and its rule, the end of a tier, or a profile, with the IP sets matched."
        " Exit status: 0 allowed, 1 denied, 2 usage.",
    )
    explain.add_argument("sources", nargs="+", metavar="SRC", help="as dry-run's")
    explain.add_argument("--from", dest="source", metavar="X", help="NS/POD, an endpoint, or an IP")
    explain.add_argument(
        "--to", dest="destination", metavar="Y", help="NS/POD, an endpoint, or an IP"
    )
    explain.add_argument(
        "--matrix",
        metavar="SELECTOR",
        help="who reaches whom among the workloads a Calico selector selects",
    )
    explain.add_argument("--port", default="tcp/80", help="PROTOCOL/PORT (default tcp/80)")
    explain.add_argument("--format", choices=("text", "json"), default="text")
    explain.set_defaults(handler=cmd_explain)
    plan = commands.add_parser(
        "plan",
        help="what a change would do: flows whose verdict flips, each node's dataplane delta",
        description="Compute the input as it is and with CHANGE applied (or deleted, or the"
        " staged policies enforced), and print every flow whose verdict flips (for the"
        " workloads whose rules or IP sets change) and each node's chains, rules, IP sets and"
        " routes added, removed or changed. Exit status: 0 nothing flips, 1 something does,"
        " 2 error.",
    )
    plan.add_argument("sources", nargs="+", metavar="SRC", help="as dry-run's")
    plan.add_argument("--change", nargs="+", metavar="FILE", help="manifests to apply")
    plan.add_argument("--delete", action="store_true", help="delete the --change resources instead")
    plan.add_argument(
        "--enforce-staged",
        action="store_true",
        help="promote every staged policy to its real twin (stagedAction Delete deletes it)",
    )
    plan.add_argument(
        "--hostname",
        action="append",
        metavar="NODE",
        help="plan for this node only (repeatable; default: every node holding workloads,"
        " each computed once and the change fed to it)",
    )
    plan.add_argument("--format", choices=("text", "json"), default="text")
    plan.set_defaults(handler=cmd_plan)
    diff = commands.add_parser(
        "diff",
        help="a node's iptables-save or nft ruleset against what pyfelix computes for it",
        description="Compare a real node's ruleset with the chains and sets pyfelix computes"
        " for that node: cali- chains, our rules in the kernel's chains and the cali sets (in"
        " nft mode the calico tables), rule by rule where the cali: ids match. For upgrade"
        " rehearsals, and for a node that misbehaves. Exit status: 0 they match, 1 they"
        " differ, 2 error.",
        epilog="example: (iptables-save; ip6tables-save; ipset save) > node-a.rules;"
        " pyfelix diff kubernetes:// --node node-a --ruleset node-a.rules",
    )
    diff.add_argument("sources", nargs="+", metavar="SRC", help="as dry-run's")
    diff.add_argument("--node", required=True, help="the node the ruleset comes from")
    diff.add_argument(
        "--ruleset",
        required=True,
        metavar="FILE",
        help="iptables-save output (ip6tables-save's and ipset save's may follow), or nft list"
        " ruleset; - for stdin",
    )
    diff.add_argument(
        "--ip-version",
        type=int,
        choices=(4, 6),
        default=4,
        help="the version of the first iptables dump in FILE (default 4; a second dump of"
        " the same tables is read as IPv6)",
    )
    diff.add_argument(
        "--kube-proxy-ipvs", action="store_true", help="the node runs kube-proxy in IPVS mode"
    )
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.set_defaults(handler=cmd_diff)
    demo = commands.add_parser(
        "demo",
        help="run the agent on a node of network namespaces and print who can reach whom",
    )
    demo.add_argument("sources", nargs="+", metavar="SRC", help="manifest files or directories")
    demo.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="how long to wait for the agent to program the node (default 20)",
    )
    demo.set_defaults(handler=cmd_demo)
    pods = commands.add_parser(
        "pods",
        help="create, check or remove pods (network namespaces) for this node's endpoints",
    )
    pods.add_argument("action", choices=("up", "check", "down"))
    pods.add_argument("sources", nargs="+", metavar="SRC", help="files, directories or etcd://URL")
    pods.add_argument("--hostname", default=default_hostname(), help="this node's name")
    pods.add_argument("--prefix", default="pod-", help="namespace name prefix (default: pod-)")
    pods.set_defaults(handler=cmd_pods)
    _add_datastore_commands(commands)
    return parser


#: Commands that load a datastore once, compute and exit. Loading builds a large heap of
#: long-lived objects and almost no cyclic garbage, and the cyclic collector, triggered by
#: allocations, walked that heap again and again (a third of a 250k-endpoint dry-run): it is
#: off for these commands, as the agent pauses it until InSync.
ONE_SHOT = frozenset({cmd_validate, cmd_dry_run})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.handler in ONE_SHOT:
        collection.pause_while_loading()
    try:
        return int(args.handler(args))
    finally:
        collection.resume()


def console() -> None:
    """The ``pyfelix`` command. A one-shot command leaves as soon as its output is flushed:
    tearing down its heap (the calculation graph is one large cycle) took 2.5 s of a
    250k-endpoint dry-run, for nothing."""
    args = build_parser().parse_args()
    try:
        if args.handler not in ONE_SHOT:
            sys.exit(int(args.handler(args)))
        collection.pause_while_loading()
        code = int(args.handler(args))
        CACHE.save()  # what atexit would have done: attrs' methods compiled here, if any
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        # Whoever read stdout has gone (``pyfelix dry-run ... | head``): stop as a tool that
        # SIGPIPE stops, without a traceback, and without flushing into the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os._exit(128 + signal.SIGPIPE)
    os._exit(code)


if __name__ == "__main__":
    console()

"""``pyfelix datastore ...``: calicoctl's apply/create/replace/delete/get against etcd, and
get/list against the Kubernetes API datastore.

Every write is validated first (nothing is written if any resource in the input is invalid),
then made with a compare-and-swap on the key's revision, so concurrent writers cannot silently
overwrite each other. Messages follow calicoctl's wording.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import attrs
import yaml

from pyfelix.datastore.etcd import EtcdClient, EtcdConfig
from pyfelix.datastore.layout import decode, encode, key_for, list_prefix, resource_key
from pyfelix.errors import ManifestError, PyfelixError
from pyfelix.resources import KINDS, ObjectMeta, Resource, load_paths, load_text
from pyfelix.resources.loader import LoadResult
from pyfelix.resources.meta import CALICO_API_VERSION
from pyfelix.validation import validate_loaded

SHORT_NAMES = {
    "gnp": "GlobalNetworkPolicy",
    "np": "NetworkPolicy",
    "sgnp": "StagedGlobalNetworkPolicy",
    "snp": "StagedNetworkPolicy",
    "wep": "WorkloadEndpoint",
    "hep": "HostEndpoint",
    "gns": "GlobalNetworkSet",
    "netset": "NetworkSet",
    "ns": "Namespace",
    "sa": "ServiceAccount",
    "svc": "Service",
    "eps": "EndpointSlice",
    "felixconfig": "FelixConfiguration",
    "bgpconfig": "BGPConfiguration",
    "clusterinfo": "ClusterInformation",
    "ipamblock": "IPAMBlock",
    "knp": "KubernetesNetworkPolicy",
    "cnp": "KubernetesClusterNetworkPolicy",
}


class CommandError(PyfelixError):
    """A datastore command that cannot be carried out; the message is for the user."""


def resolve_kind(text: str) -> type[Resource]:
    """A kind from its name, plural or short name, in any case (as calicoctl accepts)."""
    lowered = text.lower()
    # Calico's kinds first: "networkpolicy" is Calico's, as in calicoctl.
    for cls in sorted(KINDS.values(), key=lambda k: k.API_VERSION != CALICO_API_VERSION):
        # kubectl's full names tell Kubernetes' NetworkPolicy from Calico's:
        # networkpolicies.networking.k8s.io, networkpolicy.networking.k8s.io.
        group = cls.API_VERSION.rpartition("/")[0]
        full = {f"{cls.PLURAL}.{group}", f"{cls.manifest_kind().lower()}.{group}"}
        names = (cls.KIND.lower(), cls.manifest_kind().lower(), cls.PLURAL)
        if lowered in names or (group and lowered in full):
            return cls
    if lowered in SHORT_NAMES:
        return KINDS[SHORT_NAMES[lowered]]
    raise CommandError(f"resource type '{text}' is not supported")


def _describe(resource: Resource) -> str:
    where = f"{resource.namespace}/{resource.name}" if resource.NAMESPACED else resource.name
    return f"{resource.KIND}({where})"


def _load(path: str) -> LoadResult:
    if path == "-":
        return load_text(sys.stdin.read(), "<stdin>")
    return load_paths([Path(path)])


def load_for_write(path: str, out: TextIO) -> list[Resource]:
    """Load and validate; raise (writing nothing) if anything is wrong."""
    result = _load(path)
    problems = validate_loaded(result)
    if problems:
        for problem in problems:
            print(problem, file=out)
        raise CommandError(f"{len(problems)} problem(s) found; nothing was written")
    return [item.resource for item in result.resources]


def _stamp(resource: Resource, existing: Resource | None) -> Resource:
    """Keep uid and creationTimestamp across updates; set them on creation, as Calico does."""
    meta = resource.metadata
    if existing is not None:
        meta = attrs.evolve(
            meta,
            uid=existing.metadata.uid,
            creation_timestamp=existing.metadata.creation_timestamp,
        )
    else:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = attrs.evolve(
            meta,
            uid=meta.uid or str(uuid.uuid4()),
            creation_timestamp=meta.creation_timestamp or now,
        )
    return attrs.evolve(resource, metadata=attrs.evolve(meta, resource_version=""))


async def _current(client: EtcdClient, key: str) -> tuple[Resource | None, int]:
    kv = await client.get(key)
    if kv is None:
        return None, 0
    try:
        return decode(key, kv.value, kv.mod_revision), kv.mod_revision
    except ManifestError:
        return None, kv.mod_revision


async def write(client: EtcdClient, resources: Sequence[Resource], mode: str) -> int:
    """apply, create or replace each resource; returns how many were written."""
    done = 0
    for resource in resources:
        key = resource_key(resource)
        existing, revision = await _current(client, key)
        if mode == "create" and revision:
            raise CommandError(
                f"Failed to create '{resource.KIND}' resource: "
                f"resource already exists: {_describe(resource)}"
            )
        if mode == "replace":
            if not revision:
                raise CommandError(
                    f"Failed to replace '{resource.KIND}' resource: "
                    f"resource does not exist: {_describe(resource)}"
                )
            wanted = resource.metadata.resource_version
            if wanted and wanted != str(revision):
                raise CommandError(
                    f"Failed to replace '{resource.KIND}' resource: update conflict: "
                    f"{_describe(resource)} (resourceVersion {wanted}, current {revision})"
                )
        stamped = _stamp(resource, existing)
        if await client.put_if(key, encode(stamped), mod_revision=revision) is None:
            raise CommandError(
                f"Failed to {mode} '{resource.KIND}' resource: update conflict: "
                f"{_describe(resource)} changed while being written; try again"
            )
        done += 1
    return done


async def delete(client: EtcdClient, resources: Sequence[Resource]) -> int:
    for resource in resources:
        key = resource_key(resource)
        _, revision = await _current(client, key)
        if not revision or not await client.delete_if(key, mod_revision=revision):
            raise CommandError(
                f"Failed to delete '{resource.KIND}' resource: "
                f"resource does not exist: {_describe(resource)}"
            )
    return len(resources)


def _named(kind: type[Resource], name: str, namespace: str) -> Resource:
    meta = ObjectMeta(name=name, namespace=namespace if kind.NAMESPACED else "")
    return kind(metadata=meta)


async def get(
    client: EtcdClient,
    kind: type[Resource],
    names: Sequence[str],
    namespace: str,
    all_namespaces: bool,
) -> object:
    """One resource, several (a plain list), or all of a kind (a ``<Kind>List``)."""
    if names:
        found = []
        for name in names:
            if kind.KIND == "IPAMBlock":
                items = await _list(client, kind, "")
                match = [r for r in items if r.name == name]
                if not match:
                    raise CommandError(f"resource does not exist: IPAMBlock({name})")
                found.append(match[0].to_manifest())
                continue
            key = key_for(kind, namespace, name)
            resource, _ = await _current(client, key)
            if resource is None:
                where = f"{namespace}/{name}" if kind.NAMESPACED else name
                raise CommandError(f"resource does not exist: {kind.KIND}({where})")
            found.append(resource.to_manifest())
        return found[0] if len(found) == 1 else found
    items = await _list(client, kind, "" if all_namespaces else namespace)
    _, revision = await client.range("/", limit=1)
    return {
        "apiVersion": kind.API_VERSION,
        "kind": f"{kind.manifest_kind()}List",
        "metadata": {"resourceVersion": str(revision)},
        "items": [r.to_manifest() for r in items],
    }


async def _list(client: EtcdClient, kind: type[Resource], namespace: str) -> list[Resource]:
    kvs, _ = await client.list_all(list_prefix(kind, namespace))
    out = []
    for kv in kvs:
        try:
            resource = decode(kv.key, kv.value, kv.mod_revision)
        except ManifestError:
            continue
        if isinstance(resource, kind):
            out.append(resource)
    return out


def render(data: object, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=True, default_flow_style=False)


def _to_delete(args: Any, out: TextIO) -> list[Resource]:
    """What ``delete`` names: the resources of ``-f FILE``, or KIND and NAMEs."""
    if args.filename:
        return load_for_write(args.filename, out)
    if not args.kind or not args.names:
        raise CommandError("delete needs -f FILE, or KIND and NAME")
    kind = resolve_kind(args.kind)
    return [_named(kind, name, args.namespace) for name in args.names]


async def run_command(args: Any, config: EtcdConfig, out: TextIO) -> int:
    async with EtcdClient(config) as client:
        action = args.datastore_action
        if action in ("apply", "create", "replace"):
            resources = load_for_write(args.filename, out)
            count = await write(client, resources, action)
            print(f"Successfully {_past(action)} {count} resource(s)", file=out)
        elif action == "delete":
            count = await delete(client, _to_delete(args, out))
            print(f"Successfully deleted {count} resource(s)", file=out)
        else:
            kind = resolve_kind(args.kind)
            names = args.names if action == "get" else []
            data = await get(client, kind, names, args.namespace, args.all_namespaces)
            out.write(render(data, args.output))
    return 0


def kube_path(kind: type[Resource], namespace: str) -> str:
    """The API collection a kind lives in on the Kubernetes API datastore: Calico's kinds as
    crd.projectcalico.org/v1 custom resources, Kubernetes' in their own groups (``namespace``
    "": every namespace)."""
    from pyfelix.resources.crd import CRD_KINDS  # noqa: PLC0415
    from pyfelix.resources.meta import CRD_API_VERSION  # noqa: PLC0415

    if kind.API_VERSION == CALICO_API_VERSION:
        if kind.KIND not in CRD_KINDS:
            raise CommandError(f"{kind.KIND} is not stored on the Kubernetes API datastore")
        version = CRD_API_VERSION
    else:
        version = kind.API_VERSION
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    if kind.NAMESPACED and namespace:
        return f"{prefix}/namespaces/{namespace}/{kind.PLURAL}"
    return f"{prefix}/{kind.PLURAL}"


async def run_kube_command(args: Any, source: str, out: TextIO) -> int:
    """The datastore commands against the Kubernetes API, as calicoctl's KDD mode does them:
    ``get`` and ``list`` show v3 objects; ``apply``, ``create``, ``replace`` and ``delete``
    write Calico's kinds as their crd.projectcalico.org/v1 custom resources. Kubernetes'
    own kinds are written with kubectl, as calicoctl says too."""
    from pyfelix.datastore.kubernetes import KubeClient, config_for  # noqa: PLC0415

    action = args.datastore_action
    async with KubeClient(config_for(source)) as client:
        if action in ("apply", "create", "replace"):
            resources = load_for_write(args.filename, out)
            count = await kube_write(client, resources, action)
            print(f"Successfully {_past(action)} {count} resource(s)", file=out)
            return 0
        if action == "delete":
            count = await kube_delete(client, _to_delete(args, out))
            print(f"Successfully deleted {count} resource(s)", file=out)
            return 0
        return await _kube_get(client, args, out)


def _kube_object_path(resource: Resource) -> str:
    """The path of ``resource``'s custom resource; refused for a kind that is not Calico's."""
    kind = type(resource)
    if kind.API_VERSION != CALICO_API_VERSION:
        raise CommandError(
            f"{kind.KIND} is a Kubernetes kind: write it with kubectl, not on Calico's behalf"
        )
    return f"{kube_path(kind, resource.namespace)}/{resource.name}"


async def kube_write(client: Any, resources: Sequence[Resource], mode: str) -> int:
    """apply, create or replace each resource as its custom resource; returns how many."""
    from pyfelix.datastore.kubernetes import KubeError, KubeNotFound  # noqa: PLC0415
    from pyfelix.resources.crd import crd_document  # noqa: PLC0415

    for resource in resources:
        path = _kube_object_path(resource)
        collection = path.rpartition("/")[0]
        try:
            current: dict[str, Any] | None = await client.request("GET", path)
        except KubeNotFound:
            current = None
        what = f"'{resource.KIND}' resource"
        if mode == "create" and current is not None:
            raise CommandError(
                f"Failed to create {what}: resource already exists: {_describe(resource)}"
            )
        if mode == "replace" and current is None:
            raise CommandError(
                f"Failed to replace {what}: resource does not exist: {_describe(resource)}"
            )
        document = crd_document(resource.to_manifest())
        try:
            if current is None:
                document["metadata"].pop("resourceVersion", None)
                await client.request("POST", collection, body=document)
            else:
                version = document["metadata"].get("resourceVersion")
                if mode == "apply" or not version:
                    version = current["metadata"]["resourceVersion"]
                document["metadata"]["resourceVersion"] = version
                await client.request("PUT", path, body=document)
        except KubeError as exc:
            if exc.status == 409:
                raise CommandError(
                    f"Failed to {mode} {what}: update conflict: {_describe(resource)}"
                    " changed while being written; try again"
                ) from None
            raise
    return len(resources)


async def kube_delete(client: Any, resources: Sequence[Resource]) -> int:
    from pyfelix.datastore.kubernetes import KubeNotFound  # noqa: PLC0415

    for resource in resources:
        try:
            await client.request("DELETE", _kube_object_path(resource))
        except KubeNotFound:
            raise CommandError(
                f"Failed to delete '{resource.KIND}' resource: "
                f"resource does not exist: {_describe(resource)}"
            ) from None
    return len(resources)


async def _kube_get(client: Any, args: Any, out: TextIO) -> int:
    from pyfelix.datastore.kubernetes import KubeNotFound  # noqa: PLC0415
    from pyfelix.resources.meta import load_document  # noqa: PLC0415

    action = args.datastore_action
    kind = resolve_kind(args.kind)
    names = args.names if action == "get" else []
    namespace = "" if args.all_namespaces else args.namespace
    path = kube_path(kind, namespace)
    if names:
        found = []
        for name in names:
            try:
                obj = await client.request("GET", f"{path}/{name}")
            except KubeNotFound:
                where = f"{namespace}/{name}" if kind.NAMESPACED else name
                raise CommandError(f"resource does not exist: {kind.KIND}({where})") from None
            found.append(obj)
        items, version = found, ""
    else:
        items, version = await client.list(path)
    resources = []
    for obj in items:
        doc = {"apiVersion": kind_version(kind), "kind": kind.manifest_kind(), **obj}
        resource, _ = load_document(doc, path)
        if isinstance(resource, kind):
            resources.append(resource.to_manifest())
    if names:
        data: object = resources[0] if len(resources) == 1 else resources
    else:
        data = {
            "apiVersion": kind.API_VERSION,
            "kind": f"{kind.manifest_kind()}List",
            "metadata": {"resourceVersion": version},
            "items": resources,
        }
    out.write(render(data, args.output))
    return 0


def kind_version(kind: type[Resource]) -> str:
    """The apiVersion a kind's objects have on the Kubernetes API."""
    from pyfelix.resources.meta import CRD_API_VERSION  # noqa: PLC0415

    return CRD_API_VERSION if kind.API_VERSION == CALICO_API_VERSION else kind.API_VERSION


def _past(action: str) -> str:
    return {"apply": "applied", "create": "created", "replace": "replaced"}[action]

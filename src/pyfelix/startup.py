"""What the agent reads before its calculation graph starts: the Felix configuration's
datastore sources (the ``default``, ``node.<hostname>`` and selector-scoped
FelixConfigurations) and, when a selector-scoped one exists, this node's labels, as Felix
loads its configuration before the graph starts. Validation (WorkloadSourceSpoofing) and the
graph's construction (RouteSource) need it; the sources' precedence is
pyfelix.resources.config_sources'. A later change of them restarts the agent.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from pyfelix.errors import ManifestError
from pyfelix.resources import FelixConfiguration, Resource
from pyfelix.resources.cluster import Node
from pyfelix.resources.config_sources import SelectorScoped
from pyfelix.resources.loader import (
    LoadResult,
    load_parsed,
    manifest_files,
    parse_text,
    read_manifest,
)
from pyfelix.resources.parse_cache import ParseCache
from pyfelix.syncer.plain_namespaces import plain_digest

if TYPE_CHECKING:
    from pyfelix.datastore.etcd import EtcdClient
    from pyfelix.datastore.kubernetes import KubeClient

log = logging.getLogger(__name__)

V3 = "/calico/resources/v3/projectcalico.org"


def _scoped(resources: list[Resource]) -> bool:
    """Whether any of ``resources`` is a selector-scoped FelixConfiguration (then the node's
    labels are needed)."""
    return any(
        isinstance(r, FelixConfiguration) and SelectorScoped.of(r) is not None for r in resources
    )


async def startup_configurations(
    datastore: str, client: EtcdClient | None, hostname: str, cache: ParseCache | None = None
) -> list[Resource]:
    """The FelixConfigurations (and this node's Node, when a selector-scoped one may select
    it) from files, through the first read's ``cache``, or from etcd."""
    if client is None:
        root = Path(datastore)
        return await trio.to_thread.run_sync(_felix_configurations, root, cache, hostname)
    from pyfelix.datastore.etcd import EtcdError  # noqa: PLC0415
    from pyfelix.datastore.layout import decode  # noqa: PLC0415

    resources: list[Resource] = []
    prefix = f"{V3}/felixconfigurations/"
    try:
        kvs, _ = await client.list_all(prefix)
        if kvs and any(not kv.key.endswith(("/default",)) for kv in kvs):
            node = await client.get(f"{V3}/nodes/{hostname}")
            kvs += [node] if node is not None else []
    except EtcdError as exc:
        log.warning("cannot read %s before starting (%s); assuming Felix's defaults", prefix, exc)
        return []
    for kv in kvs:
        try:
            found = decode(kv.key, kv.value)
        except ManifestError as exc:
            log.warning("invalid %s treated as absent: %s", kv.key, exc)
            continue
        if found is not None:
            resources.append(found)
    return resources


async def kube_startup_configurations(client: KubeClient, hostname: str) -> list[Resource]:
    """``startup_configurations`` from the Kubernetes API: every FelixConfiguration custom
    resource, and this node's labels from its v1 Node when a selector-scoped one exists."""
    from pyfelix.datastore.kubernetes import KubeError  # noqa: PLC0415
    from pyfelix.resources.meta import CRD_API_VERSION, load_document  # noqa: PLC0415

    path = f"/apis/{CRD_API_VERSION}/felixconfigurations"
    try:
        items, _ = await client.list(path)
    except KubeError as exc:
        log.warning("cannot read %s before starting (%s); assuming Felix's defaults", path, exc)
        return []
    resources: list[Resource] = []
    for data in items:
        doc = {"apiVersion": CRD_API_VERSION, "kind": "FelixConfiguration", **data}
        found, problems = load_document(doc, path)
        if found is None:
            log.warning("invalid %s treated as absent: %s", path, "; ".join(map(str, problems)))
        else:
            resources.append(found)
    if _scoped(resources):
        node_path = f"/api/v1/nodes/{hostname}"
        try:
            node: dict[str, Any] = await client.request("GET", node_path)
        except KubeError as exc:
            log.warning("cannot read %s before starting (%s)", node_path, exc)
        else:
            labels = (node.get("metadata") or {}).get("labels") or {}
            doc = {
                "apiVersion": "projectcalico.org/v3",
                "kind": "Node",
                "metadata": {"name": hostname, "labels": labels},
            }
            found, _ = load_document(doc, node_path)
            if found is not None:
                resources.append(found)
    return resources


def _felix_configurations(
    root: Path, cache: ParseCache | None = None, hostname: str = ""
) -> list[Resource]:
    """The FelixConfigurations of the manifest files under ``root`` (and ``hostname``'s
    Node when a selector-scoped one exists): only the files that mention the kinds are
    parsed, and of those only the documents of those kinds (or lists) are decoded (the same
    file may hold a thousand policies, which the first read decodes)."""
    found = _read_kind(root, cache, "FelixConfiguration")
    configurations: list[Resource] = [r for r in found if isinstance(r, FelixConfiguration)]
    if hostname and _scoped(configurations):
        nodes = _read_kind(root, cache, "Node")
        configurations += [r for r in nodes if isinstance(r, Node) and r.name == hostname]
    return configurations


def _read_kind(root: Path, cache: ParseCache | None, kind: str) -> list[Resource]:
    found: list[Resource] = []
    for path in manifest_files(root) if root.exists() else []:
        try:
            text = read_manifest(path)
        except (OSError, UnicodeDecodeError):
            continue
        if kind not in text:
            continue
        if cache is not None:
            parsed = cache.parse(text, str(path), plain_digest)
        else:
            parsed = parse_text(text, str(path))
        if isinstance(parsed, LoadResult):
            continue
        candidates = [entry for entry in parsed if _may_be(entry[0], kind)]
        found += [item.resource for item in load_parsed(candidates, str(path)).resources]
    return found


def _may_be(document: object, kind: str) -> bool:
    """Whether a parsed document is, or may hold, a resource of ``kind``."""
    if isinstance(document, list):
        return True
    if type(document) is not dict:
        return False  # a plain object's checked fields (the parse cache's digest)
    found = document.get("kind")
    return found == kind or (isinstance(found, str) and found.endswith("List"))

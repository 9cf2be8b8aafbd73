"""The Kubernetes API datastore syncer (KDD): list and watch each kind Felix's syncer watches.

Each kind has its own list-and-watch loop, as libcalico-go's watcher caches do: list (paged),
send what differs from what this syncer holds, then watch from the listing's resource version
with bookmarks, which only move that version on. A 410 (the version is older than the API
server keeps) is answered by a new listing, diffed against what is held, so an object that
did not change sends nothing and a vanished one its deletion: nothing flaps. While the API
server is away nothing is deleted; the loop retries with a jittered backoff. A kind whose API
is not served (a custom resource kind not installed, the cluster-scoped policy API on an older
cluster) counts as synced with nothing in it, and is looked for again every
MISSING_API_RETRY, as Felix does. A 403 is RBAC refusing the agent one kind: it is named in
one line (once per change of the answer), and IN_SYNC waits, since a kind that cannot be read
would make the agent program a partial, possibly more open, view.

IN_SYNC is reported once every kind has had its first listing. Objects are decoded as the
file datastore decodes them (Calico's custom resources as their v3 twins, v1 Nodes and pods
converted), and an object that is not a valid resource is logged and treated as absent.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from pyfelix.datastore.kubernetes import (
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeNotFound,
    PageReader,
)
from pyfelix.resources.meta import CRD_API_VERSION, load_document
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.syncer.plain_namespaces import plain_entry, plain_identity
from pyfelix.syncer.processors import (
    DEFAULT_ALLOW_PROFILE,
    KV,
    Converter,
    convert,
    default_allow_profile,
    use_pod_cidr,
)

log = logging.getLogger(__name__)

BACKOFF_START = 0.5
BACKOFF_MAX = 10.0
#: A kind whose API is not served is looked for again this often (Felix: 30 minutes).
MISSING_API_RETRY = 30 * 60.0
#: The API server ends each watch after a random time in this range (client-go: 5-10 min), so
#: that the agents of a cluster do not all re-watch at once.
WATCH_SECONDS = (300, 600)


@attrs.frozen
class Watched:
    """One kind the syncer follows: its apiVersion, kind and plural."""

    api_version: str
    kind: str
    plural: str

    @property
    def path(self) -> str:
        """The collection across all namespaces."""
        if self.api_version == "v1":
            return f"/api/v1/{self.plural}"
        return f"/apis/{self.api_version}/{self.plural}"

    def label(self) -> str:
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


def _calico(kind: str, plural: str) -> Watched:
    return Watched(CRD_API_VERSION, kind, plural)


#: What Felix's syncer watches on the Kubernetes API datastore (libcalico-go's felixsyncer
#: with its k8s backend), less what pyfelix does not read yet (BGPPeer,
#: LiveMigration).
WATCHED = (
    Watched("v1", "Pod", "pods"),
    Watched("v1", "Namespace", "namespaces"),
    Watched("v1", "ServiceAccount", "serviceaccounts"),
    Watched("v1", "Node", "nodes"),
    Watched("v1", "Service", "services"),
    Watched("discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
    Watched("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    Watched("policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy", "clusternetworkpolicies"),
    _calico("ClusterInformation", "clusterinformations"),
    _calico("FelixConfiguration", "felixconfigurations"),
    _calico("Tier", "tiers"),
    _calico("GlobalNetworkPolicy", "globalnetworkpolicies"),
    _calico("StagedGlobalNetworkPolicy", "stagedglobalnetworkpolicies"),
    _calico("NetworkPolicy", "networkpolicies"),
    _calico("StagedNetworkPolicy", "stagednetworkpolicies"),
    _calico("StagedKubernetesNetworkPolicy", "stagedkubernetesnetworkpolicies"),
    _calico("GlobalNetworkSet", "globalnetworksets"),
    _calico("NetworkSet", "networksets"),
    _calico("HostEndpoint", "hostendpoints"),
    _calico("IPPool", "ippools"),
    _calico("IPAMBlock", "ipamblocks"),
    _calico("BGPConfiguration", "bgpconfigurations"),
)


def watched_kinds() -> tuple[Watched, ...]:
    """WATCHED, less the IPAM blocks with usePodCIDR: host-local IPAM writes none, and the
    Nodes' pod CIDRs stand for them (as Felix's syncer then lists no blocks)."""
    if use_pod_cidr():
        return tuple(w for w in WATCHED if w.kind != "IPAMBlock")
    return WATCHED


def listed_document(watched: Watched, obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as the API gives it, as the document a manifest would hold: with the
    apiVersion and kind a listed item lacks, without its ``managedFields`` (the API server's
    record of which client set which field, a third of a listed pod: nothing reads it, and
    client-go's informers drop it too)."""
    metadata = obj.get("metadata")
    if type(metadata) is dict and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return {"apiVersion": watched.api_version, "kind": watched.kind, **obj}


#: An object as the API server lists it, or the compiled reader's (resourceVersion, fields)
#: of a plain pod, namespace or service account (``page_reader``).
Listed = Mapping[str, Any] | tuple[str, Any]

#: The kinds the file datastore's direct path reads (``plain_entry``): a cluster's bulk.
_PLAIN_KINDS = frozenset({"Pod", "Namespace", "ServiceAccount"})


def decode_object(watched: Watched, obj: Listed, source: str) -> tuple[KV, ...]:
    """The model keys and values an API object stands for; () for one that is not a valid
    resource (logged: treated as absent). Listed items carry no apiVersion or kind.

    A plain pod, namespace or service account takes the direct path the dry-run's files take
    (the same values, in half the time of a pod decoded whole: bench/RESULTS.md); anything
    it declines is decoded whole, which names every problem. ``obj`` may be the compiled
    reader's (resourceVersion, fields) of a plain item (``page_reader``)."""
    if isinstance(obj, tuple):
        entry = plain_entry(obj[1])
        assert entry is not None  # a plain item's fields always convert
        return entry[1]
    doc = listed_document(watched, obj)
    if watched.kind in _PLAIN_KINDS:
        entry = plain_entry(doc)
        if entry is not None:
            return entry[1]
    resource, problems = load_document(doc, source)
    if resource is None:
        log.warning("invalid %s treated as absent: %s", source, "; ".join(str(p) for p in problems))
        return ()
    return tuple(convert(resource))


def object_source(watched: Watched, obj: Listed) -> str:
    """The source an object is held under (also for the compiled reader's plain items)."""
    if isinstance(obj, tuple):
        identity = plain_identity(obj[1])
        assert identity is not None  # the reader's fields are a plain item's
        _, namespace, name = identity[0]
        return named_source(watched, namespace, name)
    metadata = obj.get("metadata") or {}
    return named_source(watched, metadata.get("namespace", ""), metadata.get("name", ""))


def named_source(watched: Watched, namespace: str, name: str) -> str:
    return f"{watched.label()}/{namespace}/{name}" if namespace else f"{watched.label()}/{name}"


def page_reader(watched: Watched) -> PageReader | None:
    """The compiled reader of a listing's pages, for pods, namespaces and service accounts
    (None for another kind, or without the compiled module): each plain one comes as
    (resourceVersion, the fields ``plain_entry`` takes), as ``listed_document`` and the
    direct path would make them."""
    if watched.kind not in _PLAIN_KINDS or watched.api_version != "v1":
        return None
    from pyfelix.syncer.plain_native import listing_reader  # noqa: PLC0415

    return listing_reader(watched.kind)


def _version(obj: Listed) -> str:
    if isinstance(obj, tuple):
        return str(obj[0])  # the compiled reader's plain item
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


@attrs.define(eq=False)
class KubernetesSyncer:
    client: KubeClient
    callbacks: SyncerCallbacks
    watched: tuple[Watched, ...] = attrs.Factory(watched_kinds)
    _converter: Converter = attrs.Factory(Converter)
    #: Each kind's objects sent, by source, with the resource version sent.
    _held: dict[Watched, dict[str, str]] = attrs.Factory(dict)
    _synced: set[Watched] = attrs.Factory(set)
    _in_sync: bool = False
    #: The last refusal logged per kind (a 403 is logged again only when it changes).
    _refused: dict[Watched, str] = attrs.Factory(dict)
    resyncs: int = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.callbacks.on_status(SyncStatus.WAIT_FOR_DATASTORE)
        # Calico's backend always holds this profile (libcalico-go's DefaultAllowProfile):
        # kube-controllers' automatic host endpoints name it.
        produced = tuple(convert(default_allow_profile()))
        self.callbacks.on_updates(self._converter.produce(DEFAULT_ALLOW_PROFILE, produced, "1"))
        async with trio.open_nursery() as nursery:
            for watched in self.watched:
                self._held[watched] = {}
                nursery.start_soon(self._follow, watched)
            task_status.started()

    async def _follow(self, watched: Watched) -> None:
        backoff = BACKOFF_START
        version = ""
        while True:
            try:
                if not version:
                    version = await self._resync(watched)
                    backoff = BACKOFF_START
                version = await self._watch(watched, version)
            except KubeGone:
                log.info("watch of %s expired (410 Gone): listing again", watched.label())
                version = ""
            except KubeNotFound:
                if watched not in self._synced:
                    log.info(
                        "%s is not served by this API server: nothing of it is read; looking"
                        " again in %.0f min",
                        watched.label(),
                        MISSING_API_RETRY / 60,
                    )
                self._mark_synced(watched)
                version = ""
                await trio.sleep(MISSING_API_RETRY)
            except KubeForbidden as exc:
                if self._refused.get(watched) != str(exc):
                    self._refused[watched] = str(exc)
                    log.error(
                        "the API server refuses to let pyfelix read %s (RBAC): grant list and"
                        " watch on it; retrying (%s)",
                        watched.label(),
                        exc,
                    )
                version = ""
                await self._pause(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            except KubeError as exc:
                log.warning("%s: %s; retrying in %.1fs", watched.label(), exc, backoff)
                await self._pause(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    @staticmethod
    async def _pause(backoff: float) -> None:
        await trio.sleep(backoff * random.uniform(0.5, 1.0))

    async def _resync(self, watched: Watched) -> str:
        """List the kind and send what differs from what is held; the listing's version.
        Each page is decoded as it comes and its objects let go (a 100,000-pod listing held
        whole was a gigabyte); an object's revision is its own resourceVersion, as in
        Felix's watcher cache."""
        if not self._in_sync:
            self.callbacks.on_status(SyncStatus.RESYNC_IN_PROGRESS)
        held = self._held[watched]
        seen: set[str] = set()
        version = ""
        updates: list[Update] = []
        read = page_reader(watched)
        async for items, at in self.client.pages(watched.path, read=read):
            version = at
            self._refused.pop(watched, None)
            for index, obj in enumerate(items):
                source = object_source(watched, obj)
                seen.add(source)
                revision = _version(obj)
                if held.get(source) != revision:
                    updates.extend(self._record(watched, source, obj, revision))
                if index % 256 == 255:
                    await trio.lowlevel.checkpoint()
            del items  # before the next page is fetched
        for source in [s for s in held if s not in seen]:
            updates.extend(self._record(watched, source, None, version))
        self.resyncs += 1
        if updates:
            self.callbacks.on_updates(updates)
        self._mark_synced(watched)
        return version

    def _mark_synced(self, watched: Watched) -> None:
        self._synced.add(watched)
        if not self._in_sync and len(self._synced) == len(self.watched):
            self._in_sync = True
            self.callbacks.on_status(SyncStatus.IN_SYNC)

    async def _watch(self, watched: Watched, version: str) -> str:
        """Follow the kind from ``version`` until the API server ends the watch; the version
        to watch from next."""
        seconds = random.randint(*WATCH_SECONDS)
        async for event in self.client.watch(watched.path, version, seconds):
            obj = event.get("object") or {}
            kind = event.get("type")
            version = _version(obj) or version
            if kind == "BOOKMARK":
                continue
            source = object_source(watched, obj)
            updates = self._record(watched, source, None if kind == "DELETED" else obj, version)
            if updates:
                self.callbacks.on_updates(updates)
        return version

    def _record(
        self, watched: Watched, source: str, obj: Listed | None, version: str
    ) -> list[Update]:
        held = self._held[watched]
        if obj is None:
            held.pop(source, None)
            produced: tuple[KV, ...] = ()
        else:
            held[source] = _version(obj)
            produced = decode_object(watched, obj, source)
        return self._converter.produce(source, produced, version)

"""The resource envelope (apiVersion, kind, metadata, spec[, status]) and the kind registry."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeVar

import attrs

from pyfelix.errors import FieldProblem, ManifestError, Problem, excerpt
from pyfelix.resources.schema import (
    INT,
    JSON,
    RAW,
    SHARED_STR,
    STR,
    STR_LIST,
    STR_MAP,
    Context,
    Missing,
    Nested,
    Slow,
    Spec,
    decode,
    encode,
    field,
)
from pyfelix.values import FrozenMap

CALICO_API_VERSION = "projectcalico.org/v3"


@attrs.frozen
class ObjectMeta(Spec):
    # Interned, as a namespaced policy's name repeats in every namespace ("isolation",
    # "default-deny"): one copy for each of 100,000 namespaces' was 5 MB.
    name: str = field("name", SHARED_STR, default="")
    generate_name: str = field("generateName", STR, default="")
    namespace: str = field("namespace", SHARED_STR, default="")
    self_link: str = field("selfLink", STR, default="")
    uid: str = field("uid", STR, default="")
    resource_version: str = field("resourceVersion", STR, default="")
    generation: int = field("generation", INT, default=0)
    creation_timestamp: str = field("creationTimestamp", STR, default="")
    deletion_timestamp: str = field("deletionTimestamp", STR, default="")
    deletion_grace_period_seconds: int | None = field("deletionGracePeriodSeconds", INT)
    labels: FrozenMap[str] = field("labels", STR_MAP, factory=FrozenMap)
    annotations: FrozenMap[str] = field("annotations", STR_MAP, factory=FrozenMap)
    owner_references: JSON = field("ownerReferences", RAW)
    finalizers: tuple[str, ...] = field("finalizers", STR_LIST, factory=tuple)
    managed_fields: JSON = field("managedFields", RAW)


#: Each SHARED_SPEC kind's decoder of shared specs.
_SHARED_SPECS: dict[type[Spec], Nested[Spec]] = {}


def _decode_spec(cls: type[Resource], value: JSON, ctx: Context) -> Spec | Missing:
    """A resource's spec; one equal to a spec decoded already is that one, for SHARED_SPEC
    kinds (a spec with anything wrong in it is decoded alone, its problems noted)."""
    assert cls.SPEC is not None
    if cls.SHARED_SPEC:
        shared = _SHARED_SPECS.get(cls.SPEC)
        if shared is None:
            shared = _SHARED_SPECS[cls.SPEC] = Nested(cls.SPEC, shared=True)
        try:
            return shared.fast(value)
        except Slow:
            pass
    return decode(cls.SPEC, value, ctx)


@attrs.frozen
class Resource:
    """Base of every kind: class attributes describe the kind, instances hold one object.

    Subclasses declare ``spec`` (and ``status`` where the kind has one) as attrs fields whose
    types are :class:`Spec` classes, and set ``SPEC``/``STATUS`` to those classes.
    """

    KIND: ClassVar[str]
    #: The ``kind`` manifests spell, where it differs from KIND (KIND names the resource
    #: inside pyfelix, and must be unique: Kubernetes' NetworkPolicy is KubernetesNetworkPolicy,
    #: as Calico's model calls it, beside Calico's NetworkPolicy).
    MANIFEST_KIND: ClassVar[str] = ""
    API_VERSION: ClassVar[str] = CALICO_API_VERSION
    PLURAL: ClassVar[str]
    NAMESPACED: ClassVar[bool] = False
    SPEC: ClassVar[type[Spec] | None] = None
    STATUS: ClassVar[type[Spec] | None] = None
    # Kubernetes kinds such as EndpointSlice keep their body at the top level, not under spec.
    BODY_AT_TOP_LEVEL: ClassVar[bool] = False
    #: Whether equal specs are decoded once and shared (``Nested(..., shared=True)``): for
    #: kinds whose specs repeat across a cluster whole (Kubernetes' NetworkPolicies: the same
    #: default-deny or isolation policy in every namespace).
    SHARED_SPEC: ClassVar[bool] = False

    metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def labels(self) -> FrozenMap[str]:
        return self.metadata.labels

    @property
    def ident(self) -> str:
        """``Kind/namespace/name`` (``Kind/name`` for cluster-wide kinds), as errors print it:
        the kind as users write it (``NetworkPolicy.networking.k8s.io`` for Kubernetes')."""
        return resource_ident(self.shown_kind(), self.namespace, self.name)

    @classmethod
    def manifest_kind(cls) -> str:
        return cls.MANIFEST_KIND or cls.KIND

    @classmethod
    def shown_kind(cls) -> str:
        """The kind as kubectl names it to users: ``NetworkPolicy.networking.k8s.io`` beside
        Calico's ``NetworkPolicy``; Calico's and the core group's kinds by their kind alone."""
        group = cls.API_VERSION.rpartition("/")[0]
        if group in ("", CALICO_API_VERSION.rpartition("/")[0]):
            return cls.manifest_kind()
        return f"{cls.manifest_kind()}.{group}"

    @classmethod
    def decode_body(cls, doc: Mapping[str, JSON], ctx: Context) -> Self | Missing:
        """Decode a document whose apiVersion/kind are already checked."""
        meta = decode(ObjectMeta, doc.get("metadata"), ctx.at("metadata"))
        kwargs: dict[str, Any] = {}
        envelope = {"apiVersion", "kind", "metadata"}
        if cls.BODY_AT_TOP_LEVEL:
            assert cls.SPEC is not None
            body = {k: v for k, v in doc.items() if k not in envelope}
            kwargs["spec"] = decode(cls.SPEC, body, ctx)
        else:
            for key in doc:
                if key not in envelope | {"spec", "status"} or (
                    key == "status" and cls.STATUS is None
                ):
                    ctx.at(key).error("unknown field")
            if cls.SPEC is not None:
                kwargs["spec"] = _decode_spec(cls, doc.get("spec"), ctx.at("spec"))
            if cls.STATUS is not None and doc.get("status") is not None:
                kwargs["status"] = decode(cls.STATUS, doc.get("status"), ctx.at("status"))
        if isinstance(meta, Missing) or any(isinstance(v, Missing) for v in kwargs.values()):
            return Missing()
        if cls.NAMESPACED and not meta.namespace:
            meta = attrs.evolve(meta, namespace="default")
        return cls(metadata=meta, **kwargs)

    @classmethod
    def from_manifest(cls, doc: Mapping[str, JSON], source: str = "<manifest>") -> Self:
        """Build from one calicoctl-format document; raises ManifestError listing every problem."""
        resource, problems = load_document(doc, source, expected=cls)
        if resource is None:
            raise ManifestError(problems)
        assert isinstance(resource, cls)
        return resource

    def to_manifest(self) -> dict[str, JSON]:
        """What ``calicoctl get -o yaml`` prints for this object (empty fields left out)."""
        out: dict[str, JSON] = {"apiVersion": self.API_VERSION, "kind": self.manifest_kind()}
        out["metadata"] = encode(self.metadata)
        spec = getattr(self, "spec", None)
        if self.BODY_AT_TOP_LEVEL and spec is not None:
            out.update(encode(spec))
        elif spec is not None:
            encoded_spec = encode(spec)
            # Calico kinds always print a spec; Kubernetes kinds omit an empty one.
            if encoded_spec or self.API_VERSION == CALICO_API_VERSION:
                out["spec"] = encoded_spec
        status = getattr(self, "status", None)
        if status is not None:
            encoded = encode(status)
            if encoded:
                out["status"] = encoded
        return out


def resource_ident(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


KINDS: dict[str, type[Resource]] = {}
#: The kinds by the ``kind`` manifests spell (several for NetworkPolicy), Calico's first:
#: that one is assumed when the apiVersion matches none of them (as calicoctl would).
MANIFEST_KINDS: dict[str, list[type[Resource]]] = {}
R = TypeVar("R", bound=type[Resource])


def register(cls: R) -> R:
    """Class decorator adding a kind to the registry the loader consults."""
    KINDS[cls.KIND] = cls
    same = MANIFEST_KINDS.setdefault(cls.manifest_kind(), [])
    same.insert(0 if cls.API_VERSION == CALICO_API_VERSION else len(same), cls)
    return cls


#: The modules that define each kind manifests spell (each module registers its classes when
#: imported): a lookup imports only the modules of the kind it is asked for, so an agent whose
#: datastore holds endpoints and policies never builds the other kinds' 70-odd classes
#: (tests/test_resources.py checks this table against what the modules register).
MANIFEST_KIND_MODULES: dict[str, tuple[str, ...]] = {
    "AdminNetworkPolicy": ("k8s_policy",),
    "BGPConfiguration": ("cluster",),
    "BaselineAdminNetworkPolicy": ("k8s_policy",),
    "BlockAffinity": ("networks",),
    "ClusterInformation": ("cluster",),
    "ClusterNetworkPolicy": ("k8s_policy",),
    "EndpointSlice": ("kubernetes",),
    "FelixConfiguration": ("cluster",),
    "GlobalNetworkPolicy": ("policy",),
    "GlobalNetworkSet": ("networks",),
    "HostEndpoint": ("endpoints",),
    "IPAMBlock": ("networks",),
    "IPPool": ("networks",),
    "Namespace": ("kubernetes",),
    "NetworkPolicy": ("policy", "k8s_policy"),
    "NetworkSet": ("networks",),
    "Node": ("cluster", "k8s_node"),
    "Pod": ("pods",),
    "Profile": ("policy",),
    "Service": ("kubernetes",),
    "ServiceAccount": ("kubernetes",),
    "StagedGlobalNetworkPolicy": ("policy",),
    "StagedKubernetesNetworkPolicy": ("k8s_policy",),
    "StagedNetworkPolicy": ("policy",),
    "Tier": ("policy",),
    "WorkloadEndpoint": ("endpoints",),
}
#: The apiVersions of the kinds registered (tests/test_resources.py checks it against the
#: registry), and Calico's CRD version of its own kinds: a document with a known kind and one
#: of these is never one to skip (resources/skipped.py).
CRD_API_VERSION = "crd.projectcalico.org/v1"
READ_API_VERSIONS = frozenset(
    {
        CALICO_API_VERSION,
        CRD_API_VERSION,
        "v1",
        "discovery.k8s.io/v1",
        "networking.k8s.io/v1",
        "policy.networking.k8s.io/v1alpha1",
        "policy.networking.k8s.io/v1alpha2",
    }
)
#: Every module that defines kinds.
KIND_MODULES = tuple(sorted({m for modules in MANIFEST_KIND_MODULES.values() for m in modules}))
#: The manifest kinds whose modules are imported.
_IMPORTED: set[str] = set()


@functools.cache
def known_kinds() -> None:
    """Import every kind's module (once): for what lists every kind (``KINDS``)."""
    for name in KIND_MODULES:
        importlib.import_module(f"pyfelix.resources.{name}")
    _IMPORTED.update(MANIFEST_KIND_MODULES)


def kind_for(kind: Any, api_version: Any) -> type[Resource] | None:
    """The kind a manifest's ``kind`` and ``apiVersion`` name (for a known ``kind`` with another
    apiVersion, Calico's or else the first registered, so the apiVersion is what gets
    reported)."""
    if not isinstance(kind, str):
        return None
    if kind not in _IMPORTED:
        modules = MANIFEST_KIND_MODULES.get(kind)
        if modules is None:
            return None
        for name in modules:
            importlib.import_module(f"pyfelix.resources.{name}")
        _IMPORTED.add(kind)
    candidates = MANIFEST_KINDS.get(kind)
    if not candidates:
        return None
    for cls in candidates:
        if api_version == cls.API_VERSION:
            return cls
    return candidates[0]


def _problems_from(
    field_problems: list[FieldProblem], source: str, line: int | None, ident: str | None
) -> list[Problem]:
    return [Problem(source, p.message, line, ident, p.field) for p in field_problems]


def load_document(
    doc: JSON,
    source: str,
    line: int | None = None,
    expected: type[Resource] | None = None,
) -> tuple[Resource | None, list[Problem]]:
    """Turn one document (not a List) into a resource, or report why not."""
    if not isinstance(doc, Mapping):
        return None, [Problem(source, f"expected a mapping, got {excerpt(doc)}", line)]
    kind = doc.get("kind")
    metadata = doc.get("metadata")
    name = metadata.get("name", "") if isinstance(metadata, Mapping) else ""
    namespace = metadata.get("namespace", "") if isinstance(metadata, Mapping) else ""
    cls = kind_for(kind, doc.get("apiVersion"))
    shown_kind = cls.KIND if cls is not None else str(kind)
    ident = resource_ident(shown_kind, str(namespace or ""), str(name or "")) if kind else None
    if cls is None:
        message = "missing field 'kind'" if kind is None else f"unknown kind {excerpt(kind)}"
        return None, [Problem(source, message, line, ident, "kind" if kind else "")]
    if expected is not None and cls is not expected:
        wanted = expected.manifest_kind()
        return None, [Problem(source, f"expected kind {wanted}", line, ident, "kind")]
    ctx = Context()
    api_version = doc.get("apiVersion")
    if api_version == CRD_API_VERSION and cls.API_VERSION == CALICO_API_VERSION:
        from pyfelix.resources.crd import CRD_KINDS, v3_document  # noqa: PLC0415

        if cls.KIND in CRD_KINDS:
            doc, crd_problems = v3_document(doc)
            api_version = CALICO_API_VERSION
            ctx.problems.extend(crd_problems)
            metadata = doc.get("metadata")
            if isinstance(metadata, Mapping) and metadata.get("name") != name:
                name = metadata.get("name", "")
                ident = resource_ident(cls.shown_kind(), str(namespace or ""), str(name or ""))
    if api_version != cls.API_VERSION:
        ctx.at("apiVersion").error(f"expected {cls.API_VERSION!r}, got {excerpt(api_version)}")
    if cls.NAMESPACED and not namespace and ident is not None:
        ident = resource_ident(cls.shown_kind(), "default", str(name or ""))
    resource = cls.decode_body(doc, ctx)
    if not name:
        ctx.at("metadata.name").error("a name is required")
    if ctx.problems or isinstance(resource, Missing):
        return None, _problems_from(ctx.problems, source, line, ident)
    return resource, []


@attrs.frozen
class ConditionsStatus(Spec):
    """The status block of Tier and IPPool: Kubernetes conditions, carried verbatim."""

    conditions: JSON = field("conditions", RAW)

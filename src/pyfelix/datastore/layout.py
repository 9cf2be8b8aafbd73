"""Where resources live in etcd and how they are encoded: Calico's layout.

* Calico kinds: ``/calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>``, the
  value being the resource's JSON without ``resourceVersion`` (etcd's mod revision is the
  version, filled in on read).
* IPAM blocks: ``/calico/ipam/v2/assignment/ipv4/block/10.65.0.0-26`` in Calico's v2 IPAM JSON
  (snake_case attributes, ``affinity: "host:<node>"``), shown to the rest of pyfelix as the v3
  IPAMBlock kind.
* Kubernetes kinds, which Calico itself only reads from the Kubernetes API, are kept beside
  them so one etcd holds a whole cluster: ``/calico/resources/v3/core/<plural>/...`` for ``v1``
  kinds and ``/calico/resources/v3/discovery.k8s.io/endpointslices/...``.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from pyfelix import jsontext
from pyfelix.errors import ManifestError, Problem
from pyfelix.resources.meta import CALICO_API_VERSION, Resource, load_document

if TYPE_CHECKING:
    from pyfelix.resources import IPAMBlock

RESOURCES_PREFIX = "/calico/resources/v3/"
IPAM_BLOCK_PREFIX = "/calico/ipam/v2/assignment/"
WATCH_PREFIX = "/calico/"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else "core"


@functools.cache
def _by_plural() -> dict[tuple[str, str], type[Resource]]:
    """A key's group and plural name its kind (a group's kinds may have different versions).
    Built on the first key read: it imports every kind, which an agent reading files need not
    (``pyfelix.resources.meta.MANIFEST_KIND_MODULES``)."""
    from pyfelix.resources import KINDS  # noqa: PLC0415

    return {(group_of(cls.API_VERSION), cls.PLURAL): cls for cls in KINDS.values()}


def _ipam_block() -> type[IPAMBlock]:
    from pyfelix.resources.networks import IPAMBlock  # noqa: PLC0415

    return IPAMBlock


def cidr_segment(cidr: str) -> str:
    return cidr.replace("/", "-", 1)


def block_name(cidr: str) -> str:
    """Calico's IPAMBlock resource name: the CIDR with '.', ':' and '/' as '-'."""
    return cidr.replace(".", "-").replace(":", "-").replace("/", "-")


def key_for(kind: type[Resource], namespace: str, name: str, spec: Any = None) -> str:
    """The etcd key of a resource (IPAM blocks need their spec for the CIDR)."""
    if kind.KIND == "IPAMBlock":
        cidr = spec.cidr if spec is not None else ""
        version = 6 if ":" in cidr else 4
        return f"{IPAM_BLOCK_PREFIX}ipv{version}/block/{cidr_segment(cidr)}"
    group = group_of(kind.API_VERSION)
    path = f"{namespace}/{name}" if kind.NAMESPACED else name
    return f"{RESOURCES_PREFIX}{group}/{kind.PLURAL}/{path}"


def resource_key(resource: Resource) -> str:
    return key_for(
        type(resource), resource.namespace, resource.name, getattr(resource, "spec", None)
    )


def list_prefix(kind: type[Resource], namespace: str = "") -> str:
    if kind.KIND == "IPAMBlock":
        return IPAM_BLOCK_PREFIX
    base = f"{RESOURCES_PREFIX}{group_of(kind.API_VERSION)}/{kind.PLURAL}/"
    return f"{base}{namespace}/" if namespace and kind.NAMESPACED else base


def encode(resource: Resource) -> str:
    """The stored JSON: the manifest without resourceVersion (IPAM blocks in v2 form)."""
    if resource.KIND == "IPAMBlock":
        spec = resource.to_manifest()["spec"]
        return json.dumps(
            {
                "cidr": spec["cidr"],
                "affinity": spec.get("affinity") or None,
                "allocations": spec.get("allocations", []),
                "unallocated": spec.get("unallocated", []),
                "attributes": spec.get("attributes", []),
                "sequenceNumber": spec.get("sequenceNumber", 0),
                "sequenceNumberForAllocation": spec.get("sequenceNumberForAllocation"),
                "deleted": spec.get("deleted", False),
            },
            separators=(",", ":"),
        )
    manifest = resource.to_manifest()
    manifest["metadata"].pop("resourceVersion", None)
    return json.dumps(manifest, separators=(",", ":"))


def _block_document(key: str, data: dict[str, Any]) -> dict[str, Any]:
    cidr = str(data.get("cidr", ""))
    if not cidr:
        segment = key.rsplit("/", 1)[-1]
        head, _, bits = segment.rpartition("-")
        cidr = f"{head}/{bits}"
    spec = {
        "cidr": cidr,
        "affinity": data.get("affinity") or "",
        "allocations": data.get("allocations") or [],
        "unallocated": data.get("unallocated") or [],
        "attributes": data.get("attributes") or [],
        "sequenceNumber": data.get("sequenceNumber", 0),
        "sequenceNumberForAllocation": data.get("sequenceNumberForAllocation"),
        "deleted": bool(data.get("deleted", False)),
        "strictAffinity": bool(data.get("strictAffinity", False)),
    }
    return {
        "apiVersion": CALICO_API_VERSION,
        "kind": "IPAMBlock",
        "metadata": {"name": block_name(cidr)},
        "spec": spec,
    }


def decode(key: str, value: bytes, mod_revision: int = 0) -> Resource | None:
    """The resource stored at ``key``; None for keys pyfelix does not read (status, handles).

    Raises ManifestError when the key is not UTF-8, or the value is not JSON or not a valid
    resource of the kind its key names.
    """
    parsed = parse(key, value)
    if parsed is None:
        return None
    return decode_document(key, *parsed, mod_revision)


def parse(
    key: str, value: bytes, document: dict[str, Any] | None = None
) -> tuple[type[Resource], dict[str, Any]] | None:
    """The kind ``key`` names and the document stored there (``document``, when the value
    was parsed already), not decoded yet; None for keys pyfelix does not read. Raises
    ManifestError as ``decode`` does."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError([Problem(ascii(key), "key is not valid UTF-8")]) from None
    try:
        return _parse(key, value, document)
    except RecursionError:
        raise ManifestError([Problem(key, "value is nested too deeply")]) from None


def _parse(
    key: str, value: bytes, parsed: dict[str, Any] | None
) -> tuple[type[Resource], dict[str, Any]] | None:
    if key.startswith(IPAM_BLOCK_PREFIX):
        if "/block/" not in key:
            return None
        return _ipam_block(), _block_document(
            key, parsed if parsed is not None else _json(key, value)
        )
    if not key.startswith(RESOURCES_PREFIX):
        return None
    parts = key[len(RESOURCES_PREFIX) :].split("/")
    if len(parts) < 3:
        return None
    cls = _by_plural().get((parts[0], parts[1]))
    if cls is None:
        return None
    document = parsed if parsed is not None else _json(key, value)
    if document.get("kind") != cls.manifest_kind():
        expected = cls.manifest_kind()
        raise ManifestError([Problem(key, f"expected kind {expected}", None, None, "kind")])
    return cls, document


def decode_document(
    key: str, cls: type[Resource], document: dict[str, Any], mod_revision: int = 0
) -> Resource:
    """The resource of kind ``cls`` in ``document`` (from :func:`parse`); raises ManifestError
    naming every problem."""
    metadata = document.get("metadata")
    if mod_revision and isinstance(metadata, dict):
        # etcd's revision is the resource version; set before decoding, not copied in after.
        metadata["resourceVersion"] = str(mod_revision)
    try:
        resource, problems = load_document(document, key, expected=cls)
    except RecursionError:
        raise ManifestError([Problem(key, "value is nested too deeply")]) from None
    if resource is None:
        raise ManifestError(problems)
    return resource


def _json(key: str, value: bytes) -> dict[str, Any]:
    try:
        data = jsontext.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError([Problem(key, f"value is not valid JSON: {exc}")]) from None
    if not isinstance(data, dict):
        raise ManifestError([Problem(key, "value is not a JSON object")])
    return data

"""A file's plain pods and WorkloadEndpoints read by the compiled reader (src/native), a
whole JSON List or array at a time.

The typed decoders (plain_pods_typed.py, plain_workloads_typed.py) still build a Python
object for every field they read and leave the checks to Python; half the validating child's
time on a dump of 250,000 pods went there and to splitting the file into its items. The
compiled reader steps through the file's text once, and for each pod or endpoint whose fields
it can vouch for gives the very tuple ``plain_pod_fields`` or ``plain_fields`` gives; every
other item comes back as its text, for the Python paths. Its checks are the Python ones or
stricter, and whatever it is unsure of it gives back, so the output never depends on it, only
the time does: tests/test_plain_pods.py and tests/test_plain_workloads.py hold the two equal,
document by generated document. Without the compiled module (built by ``make`` where cargo
is installed) ``native_splitter`` gives None and the pure path reads every file.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

from pyfelix import jsontext
from pyfelix.resources.k8s_conversion import (
    AWS_POD_IPS_ANNOTATION,
    FINISHED_PHASES,
    POD_IP_ANNOTATION,
    POD_IPS_ANNOTATION,
)
from pyfelix.resources.loader import is_list_document
from pyfelix.resources.pods import CONTAINER_UNREAD, POD_SPEC_UNREAD, POD_STATUS_UNREAD
from pyfelix.syncer import plain_workloads
from pyfelix.syncer.plain_pods import METADATA_STRINGS, SPECIAL_ANNOTATIONS

try:
    from pyfelix._native import PlainReader
except ImportError:  # not built: the pure path reads every file
    _COMPILED: type[PlainReader] | None = None
else:
    _COMPILED = PlainReader

log = logging.getLogger(__name__)

#: A split file: its List's own fields (None for a top-level array) and its items, each its
#: fields' tuple or its text.
Split = tuple[dict[str, Any] | None, list[Any]]


def _reader(compiled: type[PlainReader]) -> PlainReader:
    return compiled(
        list(METADATA_STRINGS),
        set(POD_SPEC_UNREAD),
        set(POD_STATUS_UNREAD),
        set(CONTAINER_UNREAD),
        set(SPECIAL_ANNOTATIONS),
        [(POD_IPS_ANNOTATION, True), (POD_IP_ANNOTATION, False), (AWS_POD_IPS_ANNOTATION, True)],
        set(FINISHED_PHASES),
        list(plain_workloads.METADATA_STRINGS),
        list(plain_workloads.SPEC_STRINGS),
        list(plain_workloads.SPEC_UNREAD_STRINGS),
    )


def native_splitter() -> Callable[[str], Split | None] | None:
    """``split_items``' counterpart that reads the plain pods too, or None without the
    compiled module."""
    if _COMPILED is None:
        return None
    reader = _reader(_COMPILED)

    def split(text: str) -> Split | None:
        try:
            read = reader.read_list(text, _prefix())
        except ValueError:  # text Rust cannot take (a lone surrogate)
            return None
        if read is None:
            return None
        pairs, items = read
        if pairs is None:
            return None, items
        try:
            fields = {key: None if raw is None else json.loads(raw) for key, raw in pairs}
        except (ValueError, RecursionError):
            return None
        if not is_list_document(fields):
            return None
        return fields, items

    return split


def _prefix() -> str:
    return os.environ.get("FELIX_INTERFACEPREFIX", "").split(",")[0] or "cali"


#: The kinds whose listings the compiled reader reads.
LISTED_KINDS = frozenset({"Pod", "Namespace", "ServiceAccount"})


def listing_reader(kind: str = "Pod") -> Callable[[bytes], dict[str, Any] | None] | None:
    """A reader of one page of an API server's listing of v1 ``kind`` (a PodList's JSON,
    a NamespaceList's or a ServiceAccountList's), or None without the compiled module: the
    page's own fields parsed, its plain items as (resourceVersion, the fields' tuple
    ``plain_digest`` gives the item as the syncer decodes it: its managedFields dropped, of
    ``kind``), every other item parsed; None for a body the reader does not follow (the
    client then parses it whole)."""
    if _COMPILED is None or kind not in LISTED_KINDS:
        return None
    reader = _reader(_COMPILED)

    def read(body: bytes) -> dict[str, Any] | None:
        try:
            read = reader.read_list(body.decode("utf-8"), _prefix(), True, kind)
        except ValueError:  # not UTF-8, or a lone surrogate
            return None
        except BaseException as exc:
            # A panic of the compiled reader (PyO3 raises it as a BaseException): here it
            # runs in the agent itself, which parses the page in Python instead.
            if type(exc).__name__ != "PanicException":
                raise
            log.error("the compiled reader failed on a listing's page (%s): parsed here", exc)
            return None
        if read is None:
            return None
        pairs, items = read
        if pairs is None:
            return None  # a top-level array: no listing
        try:
            page = {key: None if raw is None else jsontext.loads(raw) for key, raw in pairs}
            page["items"] = [
                item if type(item) is tuple else jsontext.loads(item) for item in items
            ]
        except (ValueError, RecursionError):
            return None
        return page

    return read

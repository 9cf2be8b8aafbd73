"""The compiled reader of plain pods and WorkloadEndpoints, and of listed namespaces and
service accounts (src/native; see syncer/plain_native.py), and the model keys' kept-hash
base (model.py)."""

from typing import Any

class PlainReader:
    def __init__(
        self,
        metadata_strings: list[str],
        spec_unread: set[str],
        status_unread: set[str],
        container_unread: set[str],
        special_annotations: set[str],
        address_annotations: list[tuple[str, bool]],
        finished_phases: set[str],
        endpoint_metadata_strings: list[str],
        endpoint_strings: list[str],
        endpoint_unread_strings: list[str],
    ) -> None: ...
    def read_list(
        self, text: str, prefix: str, listed: bool = False, kind: str = "Pod"
    ) -> tuple[list[tuple[str, bytes | None]] | None, list[Any]] | None: ...

class KeptHash:
    """The base of the model's kept-hash classes: their hash kept, and read, in C."""

    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def __hash__(self) -> int: ...

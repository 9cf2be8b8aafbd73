"""Endpoint status files, as Felix writes them for Calico's CNI plugin: under
EndpointStatusPathPrefix (``/var/run/calico`` by default; empty: none), the directory
``endpoint-status`` holds a file for each local workload endpoint the dataplane reports up.
The CNI plugin can wait at pod start for its pod's file before it returns, so a pod starts
with its policy in place.

A file is named after the endpoint's key, ``<orchestrator> <workload> <endpoint>``, each part
escaped as Go's ``url.PathEscape`` escapes it (``k8s ns%2Fpod eth0``), and holds the
endpoint's interface, MAC and addresses as JSON (``{"ifaceName":..,"mac":..,"ipv4Nets":[..],
"ipv6Nets":[..]}``, empty ones left out). Nothing is written before the dataplane's first
apply; from then on the directory is brought to what is up, and read back every
REAPPLY_INTERVAL to repair it, as Felix's file reporter does. Writing is this module's; which
endpoints are up is the dataplane's, which the connector passes on.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from urllib.parse import quote

import attrs
import trio

from pyfelix import model
from pyfelix.messages import EndpointStatus

log = logging.getLogger(__name__)

STATUS_DIR = "endpoint-status"
#: Felix's file reporter reads the directory back this often.
REAPPLY_INTERVAL = 10.0
#: After a failed write, the next attempt comes this long after (then twice as long, to
#: at most REAPPLY_INTERVAL).
RETRY_START = 0.05
#: What Go's url.PathEscape leaves as it is besides letters, digits and ``-_.~``.
_PATH_SAFE = ":@&=+$"


def status_filename(key: model.WorkloadEndpointKey) -> str:
    """The file Felix names for a workload endpoint's status."""
    parts = (key.orchestrator, key.workload, key.endpoint)
    return " ".join(quote(part, safe=_PATH_SAFE) for part in parts)


def status_text(endpoint: model.WorkloadEndpoint) -> str:
    """The file's JSON, in Felix's field order and without empty fields."""
    fields = {
        "ifaceName": endpoint.name,
        "mac": endpoint.mac,
        "ipv4Nets": list(endpoint.ipv4_nets),
        "ipv6Nets": list(endpoint.ipv6_nets),
    }
    return json.dumps({k: v for k, v in fields.items() if v}, separators=(",", ":"))


@attrs.define(eq=False)
class EndpointStatusFiles:
    """The endpoint-status directory under ``prefix``, kept equal to the endpoints up."""

    prefix: Path
    #: File name -> text, for every endpoint up.
    _desired: dict[str, str] = attrs.Factory(dict)
    #: What the directory holds, as last read or written.
    _written: dict[str, str] = attrs.Factory(dict)
    _in_sync: bool = False
    _wake: trio.Event = attrs.Factory(trio.Event)

    @property
    def directory(self) -> Path:
        return self.prefix / STATUS_DIR

    def update(
        self,
        key: model.WorkloadEndpointKey,
        endpoint: model.WorkloadEndpoint | None,
        status: EndpointStatus,
    ) -> None:
        """A workload endpoint's status: its file while it is up (and its data known)."""
        name = status_filename(key)
        if status is EndpointStatus.UP and endpoint is not None:
            self._desired[name] = status_text(endpoint)
        else:
            self._desired.pop(name, None)
        self._wake.set()

    def remove(self, key: model.WorkloadEndpointKey) -> None:
        self._desired.pop(status_filename(key), None)
        self._wake.set()

    def in_sync(self) -> None:
        """The dataplane's first apply is done: the directory may be written."""
        self._in_sync = True
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self._in_sync:  # nothing is written before the dataplane's first apply
            await self._wake.wait()
            self._wake = trio.Event()
        retry, failed = RETRY_START, False
        reread_at = trio.current_time()  # the directory is read at the first write
        while True:
            wait_until = trio.current_time() + retry if failed else reread_at
            with trio.move_on_at(wait_until):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                if failed or trio.current_time() >= reread_at:
                    self._written = await trio.to_thread.run_sync(self._read)
                    reread_at = trio.current_time() + REAPPLY_INTERVAL
                await trio.to_thread.run_sync(self._reconcile, dict(self._desired))
            except OSError as exc:
                log.warning("cannot write endpoint status files in %s: %s", self.directory, exc)
                retry, failed = (min(retry * 2, REAPPLY_INTERVAL) if failed else retry), True
                continue
            retry, failed = RETRY_START, False

    def _read(self) -> dict[str, str]:
        """The directory's files and their text (created if missing)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        found = {}
        for entry in os.scandir(self.directory):
            if entry.is_file():
                try:
                    found[entry.name] = Path(entry.path).read_text()
                except (OSError, UnicodeDecodeError):
                    found[entry.name] = ""
        return found

    def _reconcile(self, desired: dict[str, str]) -> None:
        for name, text in desired.items():
            if self._written.get(name) != text:
                (self.directory / name).write_text(text)
                self._written[name] = text
        for name in self._written.keys() - desired.keys():
            (self.directory / name).unlink(missing_ok=True)
            del self._written[name]

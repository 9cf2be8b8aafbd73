"""Logging as Felix's: LogSeverityScreen for stderr, LogFilePath at LogSeverityFile (a file
that follows log rotation), LogSeveritySys to the local syslog (tagged calico-felix, so log
pipelines written for Felix find it).

A destination that cannot be set up is reported and left out; the agent goes on (Felix stops
for a log file it cannot open; a crash loop over a log file helps no one).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import socket
from typing import TYPE_CHECKING

from pyfelix.errors import one_line

if TYPE_CHECKING:
    from pyfelix.config import FelixConfig

log = logging.getLogger(__name__)

SYSLOG_SOCKET = "/dev/log"
SYSLOG_TAG = "calico-felix"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class OneLineFormatter(logging.Formatter):
    """Each record's message on one line: a line break in a value it quotes (a resource's
    name, a file's) is escaped, so it cannot forge the lines after it. A traceback, which
    the formatter appends after the message, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)


def screen_handler() -> logging.Handler:
    """stderr, as the agent logs there before (and beside) its configured destinations."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(FORMAT))
    return handler


#: Felix's "none": the destination is off.
OFF = logging.CRITICAL + 10
LEVELS = {
    "none": OFF,
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}
#: Debug applies to these; libraries stay at Info at most (pyroute2's debug log dumps every
#: netlink message and slows programming tenfold).
OURS = ("pyfelix", "pyfelix_dataplane")


def level_for(severity: str) -> int:
    """The logging level for a LogSeverityScreen value; unknown values mean Info."""
    return LEVELS.get(severity.strip().lower(), logging.INFO)


def set_severity(severity: str) -> None:
    _set_levels(level_for(severity))


def _set_levels(level: int) -> None:
    """Our loggers at ``level``; the root (so every library) at Info at most."""
    logging.getLogger().setLevel(max(level, logging.INFO))
    for name in OURS:
        logging.getLogger(name).setLevel(level)


def configure_logging(config: FelixConfig) -> list[logging.Handler]:
    """Felix's three destinations for the agent's first configuration; returns the handlers
    added (a file, syslog) beside the screen's. A severity of None turns its destination off."""
    screen = level_for(config.log_severity_screen)
    root = logging.getLogger()
    for existing in root.handlers:
        existing.setLevel(screen)
    added: list[logging.Handler] = []
    path = config.log_file_path.strip()
    file_level = level_for(config.log_severity_file)
    if path and path.lower() != "none" and file_level != OFF:
        added += _log_file(path, file_level)
    sys_level = level_for(config.log_severity_sys)
    if sys_level != OFF:
        added += _syslog(sys_level)
    for handler in added:
        root.addHandler(handler)
    _set_levels(min([screen, *(handler.level for handler in added)]))
    return added


def _log_file(path: str, level: int) -> list[logging.Handler]:
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        handler = logging.handlers.WatchedFileHandler(path)
    except OSError as exc:
        log.error("LogFilePath %s cannot be opened (%s): not logging to a file", path, exc)
        return []
    handler.setLevel(level)
    handler.setFormatter(OneLineFormatter(FORMAT))
    return [handler]


def _syslog(level: int) -> list[logging.Handler]:
    try:
        # The handler swallows a failed connection (and retries per record): try it first.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            probe.connect(SYSLOG_SOCKET)
        handler = logging.handlers.SysLogHandler(SYSLOG_SOCKET)
    except OSError as exc:
        log.error(
            "cannot connect to syslog at %s (%s); configure a local syslog service, or set "
            "LogSeveritySys none",
            SYSLOG_SOCKET,
            exc,
        )
        return []
    handler.ident = f"{SYSLOG_TAG}: "
    handler.setLevel(level)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    return [handler]

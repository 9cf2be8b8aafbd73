"""Logging as Felix's: LogSeverityScreen for stderr, LogFilePath at LogSeverityFile (a file
that follows log rotation), LogSeveritySys to the local syslog (tagged calico-felix, so log
pipelines written for Felix find it).

Lines have Felix's format, ``2026-12-05 16:05:50.123 [INFO][4242] linux/driver.py 210: ...``
(the syslog's without the time and pid, which syslog adds), so what parses Felix's logs parses
these. ``PYFELIX_LOG_FORMAT=json`` writes one JSON object a line instead (time, level, pid,
file, line, logger, message), for log pipelines that take JSON.

A destination that cannot be set up is reported and left out; the agent goes on (Felix stops
for a log file it cannot open; a crash loop over a log file helps no one).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import socket
from datetime import datetime
from typing import TYPE_CHECKING

from pyfelix.errors import one_line

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyfelix.config import FelixConfig

log = logging.getLogger(__name__)

SYSLOG_SOCKET = "/dev/log"
SYSLOG_TAG = "calico-felix"
#: Where the log format is chosen: "felix" (the default) or "json".
FORMAT_VARIABLE = "PYFELIX_LOG_FORMAT"
#: Felix's level names (logrus's, upper-cased).
LEVEL_NAMES = {"CRITICAL": "FATAL"}
#: The packages whose module a line names by its path (``linux/driver.py``), as Felix names
#: its Go files; any other logger's line names its file.
PACKAGES = ("pyfelix_dataplane.", "pyfelix.")


#: Errors writing log lines (Felix's felix_log_errors): a destination that failed a record.
ERRORS = [0]


class _Counting:
    """Counts a handler's failed records, then lets it report them as it does."""

    def __init__(self, handler: logging.Handler) -> None:
        self._report = handler.handleError

    def __call__(self, record: logging.LogRecord) -> None:
        ERRORS[0] += 1
        self._report(record)


def counted(handler: logging.Handler) -> logging.Handler:
    """``handler``, its failures counted in ERRORS."""
    handler.handleError = _Counting(handler)  # type: ignore[method-assign]
    return handler


def _source(record: logging.LogRecord) -> str:
    for package in PACKAGES:
        if record.name.startswith(package):
            return record.name.removeprefix(package).replace(".", "/") + ".py"
    return record.filename


class OneLineFormatter(logging.Formatter):
    """Felix's line: time to the millisecond, ``[LEVEL][pid]``, the file and line, the
    message, on one line: a line break in a value it quotes (a resource's name, a file's) is
    escaped, so it cannot forge the lines after it. A traceback, which the formatter appends
    after the message, keeps its lines. ``syslog``: without the time and pid (syslog's)."""

    def __init__(self, syslog: bool = False) -> None:
        super().__init__()
        self.syslog = syslog

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = one_line(record.message)
        level = LEVEL_NAMES.get(record.levelname, record.levelname)
        where = f"{_source(record)} {record.lineno}: {message}"
        if self.syslog:
            return f"{level} {where}"
        stamp = datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        return f"{stamp} [{level}][{record.process}] {where}"


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with a traceback (if any) in its ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created).isoformat(timespec="milliseconds"),
            "level": LEVEL_NAMES.get(record.levelname, record.levelname).lower(),
            "pid": record.process,
            "file": _source(record),
            "line": record.lineno,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


def formatter(environ: Mapping[str, str] | None = None) -> logging.Formatter:
    """The formatter PYFELIX_LOG_FORMAT asks for (Felix's line unless "json")."""
    chosen = (os.environ if environ is None else environ).get(FORMAT_VARIABLE, "")
    return JsonFormatter() if chosen.strip().lower() == "json" else OneLineFormatter()


def screen_handler() -> logging.Handler:
    """stderr, as the agent logs there before (and beside) its configured destinations."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter())
    return counted(handler)


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
    handler.setFormatter(formatter())
    return [counted(handler)]


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
    handler.setFormatter(OneLineFormatter(syslog=True))
    return [counted(handler)]

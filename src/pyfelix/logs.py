"""Log levels from Felix's LogSeverityScreen (Debug, Info, Warning, Error, Fatal)."""

from __future__ import annotations

import logging

LEVELS = {
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
    level = level_for(severity)
    logging.getLogger().setLevel(max(level, logging.INFO))
    for name in OURS:
        logging.getLogger(name).setLevel(level)

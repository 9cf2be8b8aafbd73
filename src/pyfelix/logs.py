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


def level_for(severity: str) -> int:
    """The logging level for a LogSeverityScreen value; unknown values mean Info."""
    return LEVELS.get(severity.strip().lower(), logging.INFO)


def set_severity(severity: str) -> None:
    logging.getLogger().setLevel(level_for(severity))

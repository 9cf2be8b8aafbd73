"""Felix's log destinations: a file that follows rotation, syslog tagged calico-felix, each at
its own level, and a destination that cannot be set up reported, not fatal."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyfelix import logs
from pyfelix.config import parse_config
from pyfelix.logs import JsonFormatter, OneLineFormatter


@pytest.fixture
def no_syslog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "SYSLOG_SOCKET", str(tmp_path / "no-such-socket"))


@pytest.fixture
def clean_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = [handler.level for handler in handlers]
    yield
    for handler in root.handlers[len(handlers) :]:
        handler.close()
    root.handlers[:] = handlers
    for handler, handler_level in zip(handlers, levels, strict=True):
        handler.setLevel(handler_level)
    root.setLevel(level)
    for name in logs.OURS:
        logging.getLogger(name).setLevel(logging.NOTSET)


def test_file_and_syslog_at_their_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_root: None
) -> None:
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(tmp_path / "log.sock"))
    receiver.settimeout(5)
    monkeypatch.setattr(logs, "SYSLOG_SOCKET", str(tmp_path / "log.sock"))
    path = tmp_path / "calico" / "felix.log"
    config = parse_config(
        {"LogFilePath": str(path), "LogSeverityFile": "Debug", "LogSeveritySys": "Warning"}
    )
    assert len(logs.configure_logging(config)) == 2
    agent = logging.getLogger("pyfelix.test")
    agent.debug("detail for the file")
    agent.warning("worth a syslog line")
    text = path.read_text()
    assert "detail for the file" in text
    assert "worth a syslog line" in text
    message = receiver.recv(4096).decode()
    assert "calico-felix: " in message
    assert "worth a syslog line" in message
    # logrotate moves the file away: the next line goes to a new file at the same path.
    path.rename(tmp_path / "calico" / "felix.log.1")
    agent.info("after rotation")
    assert "after rotation" in path.read_text()
    receiver.close()


def test_destinations_that_cannot_be_set_up_are_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, no_syslog: None, clean_root: None
) -> None:
    (tmp_path / "file").write_text("")
    config = parse_config({"LogFilePath": str(tmp_path / "file" / "felix.log")})
    with caplog.at_level(logging.ERROR):
        assert logs.configure_logging(config) == []
    assert "LogFilePath" in caplog.text
    assert "syslog" in caplog.text
    assert logs.configure_logging(parse_config({"LogFilePath": "none"})) == []


def test_levels_follow_the_most_verbose_destination(no_syslog: None, clean_root: None) -> None:
    """Our loggers go as verbose as the most verbose destination; libraries stay at Info at
    most, so Debug does not bring pyroute2's per-message dumps with it."""
    logs.configure_logging(parse_config({"LogSeverityScreen": "Debug", "LogFilePath": "none"}))
    assert logging.getLogger("pyfelix_dataplane.linux.driver").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("pyroute2.netlink").isEnabledFor(logging.DEBUG)
    assert logging.getLogger("pyroute2.netlink").isEnabledFor(logging.INFO)
    logs.configure_logging(parse_config({"LogSeverityScreen": "Error", "LogFilePath": "none"}))
    assert not logging.getLogger("pyfelix.agent").isEnabledFor(logging.WARNING)
    assert all(h.level == logging.ERROR for h in logging.getLogger().handlers)


def test_none_turns_a_destination_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, no_syslog: None, clean_root: None
) -> None:
    """Felix's "none": no syslog attempted (so no error on a host without one), no file."""
    path = tmp_path / "felix.log"
    config = parse_config(
        {"LogSeveritySys": "none", "LogSeverityFile": "None", "LogFilePath": str(path)}
    )
    with caplog.at_level(logging.ERROR):
        assert logs.configure_logging(config) == []
    assert "syslog" not in caplog.text
    assert not path.exists()


def test_a_line_break_in_a_name_cannot_forge_a_log_line(tmp_path: Path) -> None:
    """A resource's name (or a file's) holding a line break is quoted escaped, on stderr and in
    validate's output alike: what follows it stays on its line."""
    forged = "bad\n2026-12-04 00:00:00,000 INFO pyfelix.agent: all is well"
    (tmp_path / "a.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\n"
        f"metadata: {{name: {json.dumps(forged)}}}\nspec: {{selector: all()}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 1
    assert not any(line.startswith("2026-12-04 00:00:00") for line in result.stdout.splitlines())
    assert "bad\\n2026-12-04" in result.stdout
    record = logging.LogRecord("pyfelix.x", logging.WARNING, "f", 1, "invalid %s", (forged,), None)
    formatted = OneLineFormatter().format(record)
    assert len(formatted.splitlines()) == 1
    assert len(JsonFormatter().format(record).splitlines()) == 1


def test_lines_have_felix_format_and_a_json_form_on_request() -> None:
    """Felix's line: ``date time.ms [LEVEL][pid] file line: message``, the file as the
    package's path; syslog's without time and pid; PYFELIX_LOG_FORMAT=json gives objects."""
    record = logging.LogRecord(
        "pyfelix_dataplane.linux.driver",
        logging.WARNING,
        "/x/driver.py",
        210,
        "apply %d",
        (7,),
        None,
    )
    line = OneLineFormatter().format(record)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[WARNING\]\[\d+\] linux/driver.py 210: apply 7",
        line,
    ), line
    assert OneLineFormatter(syslog=True).format(record) == "WARNING linux/driver.py 210: apply 7"
    record.levelno, record.levelname = logging.CRITICAL, "CRITICAL"
    assert "[FATAL]" in OneLineFormatter().format(record)
    entry = json.loads(logs.formatter({"PYFELIX_LOG_FORMAT": "json"}).format(record))
    assert entry["level"] == "fatal"
    assert (entry["file"], entry["line"], entry["message"]) == ("linux/driver.py", 210, "apply 7")
    assert isinstance(logs.formatter({}), OneLineFormatter)


def test_a_line_a_destination_fails_to_write_is_counted() -> None:
    """Felix's felix_log_errors: a record a destination could not write (a closed stream)."""
    import io  # noqa: PLC0415

    stream = io.StringIO()
    handler = logs.counted(logging.StreamHandler(stream))
    handler.handleError = logs._Counting(logging.Handler())  # type: ignore[method-assign]
    stream.close()
    before = logs.ERRORS[0]
    handler.handle(logging.LogRecord("pyfelix.x", logging.WARNING, "f", 1, "lost", (), None))
    assert logs.ERRORS[0] == before + 1

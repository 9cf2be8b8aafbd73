"""attrs' generated methods kept compiled (pyfelix.attrs_cache): a class built from the cache
behaves as one attrs compiled, in another process with another hash seed; a changed class or
an unreadable cache is compiled again; and the agent's own imports compile nothing once the
cache is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from pyfelix.attrs_cache import CACHE, MethodCache

PROBE = """
import json, sys
from pathlib import Path
import pyfelix.attrs_cache as cache
cache.PACKAGES = ("probe.",)
cache.CACHE = cache.MethodCache(Path(sys.argv[1]))
from probe.values import Port, Other
try:
    Port(number=-1)
    rejected = False
except ValueError:
    rejected = True
print(json.dumps({
    "compiled": cache.CACHE.compiled,
    "saved": cache.CACHE.save(),
    "equal": Port(80) == Port(80) and Port(80) != Port(81),
    "same hash": hash(Port(80)) == hash(Port(80)),
    "classes apart": hash(Port(80)) != hash(Other(80)),
    "repr": repr(Port(80, "udp")),
    "default": Port(80).protocol,
    "rejected": rejected,
    "fields": [f.name for f in Port.__attrs_attrs__],
}))
"""

VALUES = """
import attrs

def positive(instance, attribute, value):
    if value < 0:
        raise ValueError(attribute.name)

@attrs.frozen
class Port:
    number: int = attrs.field(validator=positive)
    protocol: str = "tcp"
    {extra}

@attrs.frozen
class Other:
    number: int
"""


def run_probe(tmp_path: Path, seed: str, extra: str = "") -> dict[str, Any]:
    package = tmp_path / "probe"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "values.py").write_text(textwrap.dedent(VALUES).format(extra=extra))
    env = {
        **os.environ,
        "PYTHONHASHSEED": seed,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "cache.marshal")],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def test_a_class_from_the_cache_behaves_as_one_attrs_compiled(tmp_path: Path) -> None:
    first = run_probe(tmp_path, "1")
    assert first["compiled"] == 2
    assert first["saved"]
    second = run_probe(tmp_path, "2")
    assert second["compiled"] == 0
    assert not second["saved"]  # nothing new to write
    for result in (first, second):
        assert result["equal"]
        assert result["same hash"]
        assert result["classes apart"]
        assert result["repr"] == "Port(number=80, protocol='udp')"
        assert result["default"] == "tcp"
        assert result["rejected"]


def test_a_changed_class_is_compiled_again(tmp_path: Path) -> None:
    run_probe(tmp_path, "1")
    changed = run_probe(tmp_path, "1", extra="name: str = 'web'")
    assert changed["compiled"] == 1
    assert changed["fields"] == ["number", "protocol", "name"]
    assert run_probe(tmp_path, "3", extra="name: str = 'web'")["compiled"] == 0


def test_an_unreadable_cache_is_compiled_around_and_rewritten(tmp_path: Path) -> None:
    (tmp_path / "cache.marshal").write_bytes(b"\x00not marshal")
    broken = run_probe(tmp_path, "1")
    assert broken["compiled"] == 2
    assert broken["equal"]
    assert broken["saved"]
    assert run_probe(tmp_path, "1")["compiled"] == 0


def test_a_cache_that_cannot_be_written_is_left_alone(tmp_path: Path) -> None:
    cache = MethodCache(tmp_path / "missing" / "deeper" / "cache.marshal")
    cache.code("x = 1", "<attrs generated methods pyfelix.Probe>")
    assert cache.compiled == 1
    assert not cache.save()


def test_the_agents_imports_compile_nothing_once_the_cache_is_written() -> None:
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    write = "from pyfelix.attrs_cache import write_all; write_all()"
    subprocess.run([sys.executable, "-c", write], check=True, env=env)
    count = (
        "import pyfelix.cli, pyfelix.agent, pyfelix_dataplane.linux.driver\n"
        "from pyfelix.attrs_cache import CACHE\n"
        "print(CACHE.compiled)"
    )
    out = subprocess.run(
        [sys.executable, "-c", count], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "0"
    assert CACHE.path.exists()

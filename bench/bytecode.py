"""The bytecode of the code a benchmark times, compiled before it is timed.

An installed agent imports its modules' bytecode: pip compiles a package at install, `make
venv` compiles the checkout an editable install points at, and an agent that may write to its
checkout leaves the bytecode there on its first start. Where none can be written
(PYTHONDONTWRITEBYTECODE, which some sandboxes and CI images set, or a read-only checkout),
every start compiles the agent's 120-odd modules again, some 0.1 s of a 10,000-endpoint start
(bench/RESULTS.md). The same holds for attrs' generated methods, which pyfelix keeps compiled
beside its bytecode (``pyfelix.attrs_cache``). A benchmark compiles both first, so that it
times what an installed agent does and a baseline checkout is timed the same way.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

#: Run under the agent's own path: a checkout from before the cache has nothing to write
#: (asked of its directory: an editable install would find this checkout's module instead).
WRITE_ATTRS_CACHE = """
import pathlib, pyfelix
if (pathlib.Path(pyfelix.__file__).parent / "attrs_cache.py").exists():
    from pyfelix.attrs_cache import write_all
    write_all()
"""


def package_dirs(*packages: str) -> list[Path]:
    """The directories the imports of ``packages`` load from (in this process's path)."""
    dirs: list[Path] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"cannot find the package {name}")
        dirs.extend(Path(location) for location in spec.submodule_search_locations)
    return dirs


def compile_bytecode(*dirs: Path) -> None:
    """Write the bytecode of every module under ``dirs`` that lacks it or whose source is
    newer (what the import system would write itself, were it allowed to)."""
    for directory in dirs:
        if not compileall.compile_dir(directory, quiet=1):
            raise SystemExit(f"cannot compile the modules under {directory}")


def write_attrs_cache(env: dict[str, str] | None = None) -> None:
    """The cache of attrs' methods of the agent a process started with ``env`` runs."""
    subprocess.run([sys.executable, "-c", WRITE_ATTRS_CACHE], env=env, check=True)


def compile_agent() -> None:
    """The bytecode of the agent this process would run (a baseline's, under its PYTHONPATH)."""
    compile_bytecode(*package_dirs("pyfelix", "pyfelix_dataplane"))
    write_attrs_cache()


def compile_baseline(worktree: Path) -> str:
    """The agent of another checkout (a worktree to compare with) compiled as this one's is;
    the PYTHONPATH that runs it."""
    path = f"{worktree / 'src'}:{worktree / 'dataplane'}"
    compile_bytecode(worktree / "src", worktree / "dataplane")
    write_attrs_cache({**os.environ, "PYTHONPATH": path})
    return path

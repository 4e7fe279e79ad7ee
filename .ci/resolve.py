"""Checks that the project's dependency set resolves on other Pythons, without installing or downloading torch.

Usage: python .ci/resolve.py --python 3.12 --python 3.13 --spec torch==2.13.0 --spec triton==3.7.1
       --no-deps-spec recbole==1.2.1

For each Python version, ``pip install --dry-run --only-binary=:all:`` resolves pyproject.toml's dependencies, every
extra and the ``--spec`` pins together (pip reads wheel metadata only), and ``pip download --no-deps``
checks that each ``--no-deps-spec`` has a wheel for that Python. The versions run in parallel; a failure prints
one line per version naming the package pip could not satisfy, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNSATISFIED = re.compile(r"(?:No matching distribution found for|Could not find a version that satisfies the "
                         r"requirement) (\S+)|ResolutionImpossible|conflict(?:s|ing)? .*")


def project_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [spec for extra in project["optional-dependencies"].values() for spec in extra]


def pip(python_version: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as target:
        return subprocess.run([sys.executable, "-m", "pip", *args, "--python-version", python_version,
                               "--only-binary=:all:", "--disable-pip-version-check", "--quiet", "--target"
                               if args[0] == "install" else "--dest", target], capture_output=True, text=True)


def fault(result: subprocess.CompletedProcess) -> str:
    """The package pip names as unsatisfiable, else pip's last error line."""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("WARNING: Location")]
    for line in lines:
        match = UNSATISFIED.search(line)
        if match:
            return match.group(1) or line.strip()
    return lines[-1].strip() if lines else f"pip exited {result.returncode}"


def check(python_version: str, specs: list[str], no_deps_specs: list[str]) -> str | None:
    result = pip(python_version, "install", "--dry-run", "--ignore-installed", *project_requirements(), *specs)
    if result.returncode:
        return f"Python {python_version}: the dependency set does not resolve: {fault(result)}"
    for spec in no_deps_specs:
        result = pip(python_version, "download", "--no-deps", spec)
        if result.returncode:
            return f"Python {python_version}: {spec} (installed with --no-deps) has no wheel: {fault(result)}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", required=True, help="a Python version, e.g. 3.12")
    parser.add_argument("--spec", action="append", default=[], help="a pin resolved with the rest")
    parser.add_argument("--no-deps-spec", action="append", default=[], help="a pin installed with --no-deps")
    args = parser.parse_args()
    with ThreadPoolExecutor(len(args.python)) as pool:
        failures = [f for f in pool.map(lambda v: check(v, args.spec, args.no_deps_spec), args.python) if f]
    for failure in failures:
        print(f"resolve: {failure}", file=sys.stderr)
    if not failures:
        print(f"resolve: the dependency set resolves on Python {', '.join(args.python)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

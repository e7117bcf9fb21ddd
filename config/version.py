"""The project's version, kept in one place (pyproject.toml) and read from there at run time: the job's --version
and the traces' service.version say the same."""

import tomllib
from pathlib import Path

VERSION = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]["version"]

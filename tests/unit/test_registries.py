"""The tree holds to docs/architecture.md's promise: an ISA, a provider or a build backend is one folder
(or module) plus one registry line.

Each registry is compared with what the tree holds, so a folder nobody registered, or a registry line
whose folder is gone, fails here; each entry must be the record its contract defines.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import List

from helpers.paths import REPO

GEN = REPO / "generator"


def _packages(folder: Path) -> List[str]:
    """The sub-packages of ``folder``: its directories with an ``__init__.py``."""
    return sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())


def _modules(folder: Path, shared: tuple) -> List[str]:
    """The modules of ``folder`` other than its package file and the ``shared`` ones (the contract)."""
    return sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__" and p.stem not in shared)


def test_every_isa_folder_is_registered_once() -> None:
    from generator import isa
    from generator.isa.contract import Isa

    assert _packages(GEN / "isa") == sorted(isa.SUPPORTED)
    for name in isa.SUPPORTED:
        record = importlib.import_module(f"generator.isa.{name}").ISA
        assert isinstance(record, Isa) and record.name == name and isa.by_name(name) is record


def test_every_provider_folder_is_registered_once() -> None:
    from generator.providers import PROVIDERS
    from generator.providers.contract import Provider

    assert _packages(GEN / "providers") == sorted(PROVIDERS)
    for name, record in PROVIDERS.items():
        assert isinstance(record, Provider) and record.name == name
        assert importlib.import_module(f"generator.providers.{name}").PROVIDER is record
        assert (REPO / "sys" / "modules" / name / "Makefile").is_file()  # its bsd.kmod.mk directory
        assert (REPO / "templates" / name).is_dir()  # and its templates


def test_every_build_backend_module_is_registered_once() -> None:
    from generator.kmod.backends import BACKENDS
    from generator.kmod.backends.contract import Backend

    assert _modules(GEN / "kmod" / "backends", ("contract",)) == sorted(BACKENDS)
    for name, record in BACKENDS.items():
        assert isinstance(record, Backend) and record.name == name
        assert importlib.import_module(f"generator.kmod.backends.{name}").BACKEND is record
    assert sum(b.default_here() for b in BACKENDS.values()) >= 1  # some backend is every host's default


def test_the_scans_see_a_new_folder_or_module(tmp_path: Path) -> None:
    """The comparisons above can fail: a new package or module is listed, a plain folder is not."""
    (tmp_path / "newone").mkdir()
    (tmp_path / "newone" / "__init__.py").write_text("")
    (tmp_path / "notapackage").mkdir()
    (tmp_path / "contract.py").write_text("")
    (tmp_path / "another.py").write_text("")
    assert _packages(tmp_path) == ["newone"]
    assert _modules(tmp_path, ("contract",)) == ["another"]

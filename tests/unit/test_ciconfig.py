"""ci-config: the generated GitHub Actions workflow and Cirrus CI file, against schemas for the parts that matter.

The schemas below are ours and small: for GitHub Actions the triggers, the
two jobs, their runner, their release matrix and steps that each either
``uses`` an action or ``run``s a command; for Cirrus the two tasks, the
``freebsd_instance`` image family of every native matrix entry and the
container of the cross task.  Beyond the schemas the tests check that each
release lands in each service's spelling and that the commands are the
kinstkit ones.  Needs pyyaml and jsonschema (the ``test`` extras).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from generator.kmod.ciconfig import render_ci
from generator.common.errors import UserError
from generator.common.paths import REPO
from helpers.skips import require_python_package

yaml = require_python_package("yaml", "pyyaml")
jsonschema = require_python_package("jsonschema", "jsonschema")

RELEASES = ["14.1-RELEASE", "14.3-RELEASE"]

STEP = {
    "type": "object",
    "oneOf": [{"required": ["uses"]}, {"required": ["run"]}],
    "properties": {"uses": {"type": "string"}, "run": {"type": "string", "minLength": 1},
                   "name": {"type": "string"}, "with": {"type": "object"}},
}
GHA_SCHEMA = {
    "type": "object",
    "required": ["name", "on", "jobs"],
    "properties": {
        "on": {"type": "object", "required": ["push", "pull_request"]},
        "jobs": {
            "type": "object",
            "required": ["cross", "native"],
            "additionalProperties": {
                "type": "object",
                "required": ["runs-on", "strategy", "steps"],
                "properties": {
                    "runs-on": {"type": "string", "pattern": "^ubuntu-"},
                    "strategy": {
                        "type": "object",
                        "required": ["matrix"],
                        "properties": {"fail-fast": {"const": False}, "matrix": {"type": "object", "minProperties": 1}},
                    },
                    "steps": {"type": "array", "minItems": 2, "items": STEP},
                },
            },
        },
    },
}
CIRRUS_SCHEMA = {
    "type": "object",
    "required": ["native_task", "cross_task"],
    "properties": {
        "native_task": {
            "type": "object",
            "required": ["matrix", "build_script"],
            "properties": {
                "matrix": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["freebsd_instance", "env"],
                        "properties": {
                            "freebsd_instance": {
                                "type": "object",
                                "required": ["image_family"],
                                "properties": {"image_family": {"type": "string", "pattern": r"^freebsd-\d+-\d+$"}},
                            },
                            "env": {"type": "object", "required": ["RELEASE"]},
                        },
                    },
                },
            },
        },
        "cross_task": {
            "type": "object",
            "required": ["container", "matrix", "fetch_script", "build_script"],
            "properties": {
                "container": {"type": "object", "required": ["image"],
                              "properties": {"image": {"type": "string", "pattern": "^ubuntu:"}}},
                "matrix": {"type": "array", "minItems": 1,
                           "items": {"type": "object", "required": ["env"]}},
            },
        },
    },
    "patternProperties": {"_task$": {"type": "object", "required": ["name"]}},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("ci")
    paths = render_ci(RELEASES, out)
    assert [p.name for p in paths] == ["kinstkit-modules.yml", ".cirrus.yml"]
    return {p.name: yaml.safe_load(p.read_text()) for p in paths}, paths


def test_github_workflow_matches_its_schema(rendered) -> None:
    docs, _ = rendered
    jsonschema.validate(docs["kinstkit-modules.yml"], GHA_SCHEMA)


def test_cirrus_file_matches_its_schema(rendered) -> None:
    docs, _ = rendered
    jsonschema.validate(docs[".cirrus.yml"], CIRRUS_SCHEMA)


def test_schemas_reject_what_they_should() -> None:
    """The schemas are not vacuous: a job without steps, a step with neither uses nor run, a bad image family."""
    bad_gha = {"name": "x", "on": {"push": None, "pull_request": None},
               "jobs": {"cross": {"runs-on": "ubuntu-24.04", "strategy": {"matrix": {"release": ["1"]}},
                                  "steps": [{"name": "nothing"}, {"run": "true"}]},
                        "native": {"runs-on": "ubuntu-24.04", "strategy": {"matrix": {"release": ["1"]}}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_gha, GHA_SCHEMA)
    wrong_image = {"freebsd_instance": {"image_family": "ubuntu-22"}, "env": {"RELEASE": "r"}}
    bad_cirrus = {"native_task": {"name": "n", "build_script": "x", "matrix": [wrong_image]},
                  "cross_task": {"name": "c", "container": {"image": "ubuntu:24.04"}, "matrix": [{"env": {}}],
                                 "fetch_script": "x", "build_script": "y"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad_cirrus, CIRRUS_SCHEMA)


def test_each_release_in_each_spelling(rendered) -> None:
    docs, _ = rendered
    gha = docs["kinstkit-modules.yml"]["jobs"]
    assert gha["cross"]["strategy"]["matrix"]["release"] == RELEASES
    assert gha["native"]["strategy"]["matrix"]["include"] == [
        {"release": "14.1-RELEASE", "vm": "14.1"}, {"release": "14.3-RELEASE", "vm": "14.3"}]
    native_step = next(s for s in gha["native"]["steps"] if s.get("uses", "").startswith("vmactions/freebsd-vm@"))
    assert native_step["with"]["release"] == "${{ matrix.vm }}"
    assert "invoke build --kernel /boot/kernel/kernel --sysdir" in native_step["with"]["run"]
    cross_runs = " ".join(s.get("run", "") for s in gha["cross"]["steps"])
    assert "invoke fetch-release --release ${{ matrix.release }}" in cross_runs
    assert "invoke build --release ${{ matrix.release }} --modules kinst,dtmalloc" in cross_runs
    cirrus = docs[".cirrus.yml"]
    assert [m["freebsd_instance"]["image_family"] for m in cirrus["native_task"]["matrix"]] == [
        "freebsd-14-1", "freebsd-14-3"]
    assert [m["env"]["RELEASE"] for m in cirrus["cross_task"]["matrix"]] == RELEASES
    assert "build --release $RELEASE" in cirrus["cross_task"]["build_script"]


def test_same_input_same_bytes(rendered, tmp_path: Path) -> None:
    _, paths = rendered
    again = render_ci(RELEASES, tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]


def test_bad_releases_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="expected a FreeBSD release"):
        render_ci(["14.3"], tmp_path)
    with pytest.raises(UserError, match="need FreeBSD 14.0 or later"):
        render_ci(["13.4-RELEASE"], tmp_path)
    with pytest.raises(UserError, match="unknown module"):
        render_ci(["14.3-RELEASE"], tmp_path, modules="kinst,fbt")
    assert not any(tmp_path.iterdir())


def test_cli_writes_both_files(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "generator", "ci-config", "--release", "14.2-RELEASE", "--out",
                          str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(tmp_path / "kinstkit-modules.yml"), str(tmp_path / ".cirrus.yml")]
    assert "freebsd-14-2" in (tmp_path / ".cirrus.yml").read_text()


def test_each_file_starts_with_the_license_line(rendered) -> None:
    _, paths = rendered
    for p in paths:
        assert p.read_text().splitlines()[0] == "# SPDX-License-Identifier: BSD-2-Clause", p

"""schema/*.schema.json: generated from the parameter tables (python -m bevpool_ros.params.schema
--write), committed current, and every shipped params file in config/ valid against it (with the
jsonschema package, draft-07, as Autoware checks its schema/ files)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bevpool_ros.params import schema as S
from bevpool_ros.params.check import node_parameters

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "config").glob("*.yaml"))  # params files; config/rigs/ and config/dds/ are not


def validator(name: str):
    # requirements.txt installs it for the suite; the GPU machine's carried runtime has none
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "schema" / f"{name}.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_committed_schemas_are_the_generated_ones():
    assert S.stale(REPO / "schema") == [], "run: python -m bevpool_ros.params.schema --write"


def test_the_generator_writes_and_checks(tmp_path, capsys):
    assert S.main(["--check", "--dir", str(tmp_path)]) == 1
    assert S.main(["--write", "--dir", str(tmp_path)]) == 0
    assert S.main(["--check", "--dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(S.schemas())


def test_there_are_params_files_to_check():
    assert {p.name for p in CONFIGS} >= {"cpu.yaml", "desktop_rtx.yaml", "drive_thor.yaml"}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_params_file_is_valid(config):
    errors = [e.message for e in validator("bevpool_node").iter_errors(yaml.safe_load(config.read_text()))]
    assert not errors, f"{config.name}: {errors}"
    node_parameters(str(config))  # the node's own reader agrees


def test_the_schema_refuses_what_the_node_refuses():
    v = validator("bevpool_node")
    bad = {"/**": {"ros__parameters": {"precison": "fp16", "sync": {"slopp_s": 0.1},
                                       "sync.slop_s": 2.0, "backend": "gpu"}}}
    said = " | ".join(e.message for e in v.iter_errors(bad))
    for text in ("'precison'", "'slopp_s' was unexpected", "2.0 is greater than the maximum", "'gpu' is not one of"):
        assert text in said, said
    good = {"/rig_a/bevpool_node": {"ros__parameters": {"sync.slop_s": 0.05, "output": {"bev_dtype": "float16"},
                                                        "extrinsics.CAM_FRONT": [0, 0, 1.5, 1, 0, 0, 0],
                                                        "use_sim_time": True}}}
    assert not list(v.iter_errors(good))
    assert list(v.iter_errors({"/**": {"precision": "fp16"}}))  # no ros__parameters


def test_the_occupancy_schema():
    v = validator("bevpool_occupancy")
    assert not list(v.iter_errors({"/**": {"ros__parameters": {"threshold": 0.1, "rig_file": ""}}}))
    said = [e.message for e in v.iter_errors({"/**": {"ros__parameters": {"treshold": 0.1}}})]
    assert any("'treshold' was unexpected" in m for m in said), said

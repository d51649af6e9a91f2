"""JSON schemas (draft-07) of the nodes' params files, generated from the parameter tables in the
shape ROS 2 packages ship (Autoware's ``schema/<node>.schema.json``): ``/**`` (or any node key)
-> ``ros__parameters`` -> the parameters, with types, defaults, ranges, choices and descriptions;
a name the node does not have is not allowed. A dotted name may be written nested or dotted,
so every group is allowed both ways.

  python -m bevpool_ros.params.schema --write   (re)write schema/*.schema.json
  python -m bevpool_ros.params.schema --check   exit 1 when a committed schema is stale
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import occupancy, table
from .files import PARAMS_KEY
from .names import ROS_PARAMS

DRAFT = "http://json-schema.org/draft-07/schema#"
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schema"
_TYPES = {"bool": {"type": "boolean"}, "integer": {"type": "integer"}, "double": {"type": "number"},
          "string": {"type": "string"}, "string_array": {"type": "array", "items": {"type": "string"}}}
# bevpool_node's per-camera extrinsics: [tx, ty, tz, qw, qx, qy, qz], or [] for the rig's
_EXTRINSICS = {"type": "array", "items": {"type": "number"}, "default": [],
               "description": "camera->ego pose of <camera>: [tx, ty, tz, qw, qx, qy, qz]; empty: "
                              "the rig YAML's (a camera the node subscribes)."}


def param_schema(p: table.Param) -> dict:
    out = dict(_TYPES[p.type], description=p.description, default=p.default)
    if p.choices:
        out["enum"] = list(p.choices)
    if p.low is not None:
        out["minimum"] = p.low
    if p.high is not None:
        out["maximum"] = p.high
    return out


def _tree(params) -> dict:
    """{part: subtree or Param} from dotted names."""
    root: dict = {}
    for p in params:
        *groups, leaf = p.name.split(".")
        node = root
        for g in groups:
            node = node.setdefault(g, {})
        node[leaf] = p
    return root


def _group(tree: dict, pointer: str, extra: dict | None = None) -> dict:
    """An object schema of ``tree`` (found at JSON pointer ``pointer``): each child nested, and
    each deeper name also dotted, as a reference to its nested schema."""
    props = {}
    for key, sub in tree.items():
        if isinstance(sub, table.Param):
            props[key] = param_schema(sub)
            continue
        here = f"{pointer}/properties/{key}"
        props[key] = _group(sub, here)
        for name in _dotted(sub):
            props[f"{key}.{name}"] = {"$ref": f"{here}/properties/{name.replace('.', '/properties/')}"}
    return {"type": "object", "properties": props, **(extra or {}), "additionalProperties": False}


def _dotted(tree: dict, prefix: str = ""):
    """Every name below ``tree``, groups included, as dotted paths."""
    for key, sub in tree.items():
        yield prefix + key
        if not isinstance(sub, table.Param):
            yield from _dotted(sub, f"{prefix}{key}.")


def node_schema(node: str, params, patterns: dict | None = None) -> dict:
    """The params-file schema of ``node`` with parameters ``params`` (table rows);
    ``patterns``: names allowed by pattern (regex -> schema), e.g. per-camera ones."""
    definition = _group(_tree([*params, *ROS_PARAMS]), f"#/definitions/{node}",
                        {"patternProperties": patterns} if patterns else None)
    section = {"type": "object", "properties": {PARAMS_KEY: {"$ref": f"#/definitions/{node}"}},
               "required": [PARAMS_KEY], "additionalProperties": False}
    return {"$schema": DRAFT, "title": f"Parameters for {node}", "type": "object",
            "definitions": {node: definition},
            "properties": {"/**": section},
            "additionalProperties": section,  # another node key (bevpool_node, /ns/bevpool_node)
            "minProperties": 1}


def schemas() -> dict[str, dict]:
    """file name -> schema, one per node."""
    extrinsics = {r"^extrinsics\.[^.]+$": _EXTRINSICS}
    node = node_schema("bevpool_node", table.PARAMS, extrinsics)
    # nested too: extrinsics: {CAM_FRONT: [...]}
    node["definitions"]["bevpool_node"]["properties"]["extrinsics"] = {
        "type": "object", "additionalProperties": _EXTRINSICS}
    return {"bevpool_node.schema.json": node,
            "bevpool_occupancy.schema.json": node_schema("bevpool_occupancy", occupancy.PARAMS)}


def text(schema: dict) -> str:
    return json.dumps(schema, indent=2) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """The schema files under ``directory`` that differ from the tables (or are missing)."""
    return [name for name, schema in schemas().items()
            if not (directory / name).is_file() or (directory / name).read_text() != text(schema)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bevpool_ros.params.schema", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="write the schemas into --dir")
    what.add_argument("--check", action="store_true", help="exit 1 when a schema in --dir is stale")
    p.add_argument("--dir", type=Path, default=SCHEMA_DIR, help=f"default: {SCHEMA_DIR}")
    args = p.parse_args(argv)
    if args.check:
        late = stale(args.dir)
        for name in late:
            print(f"{args.dir / name}: stale, run python -m bevpool_ros.params.schema --write",
                  file=sys.stderr)
        return 1 if late else 0
    if args.write:
        args.dir.mkdir(parents=True, exist_ok=True)
        for name, schema in schemas().items():
            (args.dir / name).write_text(text(schema))
            print(f"wrote {args.dir / name}")
        return 0
    print(text(schemas()["bevpool_node.schema.json"]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ROS 2 params files read as rcl reads them, with one-line errors: what a node named ``fqn``
gets from a file, which ``--params-file`` arguments a command line holds. No ROS import here.

Layout (rcl_yaml_param_parser): node keys map to ``ros__parameters``; a node key is a name
(``bevpool_node``, ``/rig_a/bevpool_node``) or a pattern (``/**`` any node, ``*`` one name part),
or namespaces nested as mappings (``rig_a: {bevpool_node: {ros__parameters: ...}}``).
Parameter names nest on the dots: ``sync: {slop_s: 0.02}`` and ``sync.slop_s: 0.02`` are one name.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .names import ParameterError

PARAMS_KEY = "ros__parameters"


class ParamsFileError(ParameterError):
    """A params file that cannot be used, in one line starting with its path."""


def read_params_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """{node key: {dotted parameter name: value}} in file order; ParamsFileError when the file is
    missing, unreadable, not YAML or not laid out as node keys -> ros__parameters."""
    import yaml

    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ParamsFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ParamsFileError(f"{path}: is a directory, not a params file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ParamsFileError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ParamsFileError(f"{path}: not valid YAML ({_yaml_problem(e)})") from None
    if doc is None:
        raise ParamsFileError(f"{path}: empty (expected /**: {{{PARAMS_KEY}: {{...}}}})")
    if not isinstance(doc, dict):
        raise ParamsFileError(f"{path}: expected a mapping of node names to {PARAMS_KEY}, "
                              f"got a YAML {type(doc).__name__}")
    sections: dict[str, dict[str, Any]] = {}
    _collect(path, doc, [], sections)
    return sections


def _yaml_problem(e) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem


def _collect(path, mapping: dict, keys: list, out: dict) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ParamsFileError(f"{path}: key {key!r} is not a node name")
        node = re.sub("/+", "/", "/".join(keys))
        if key == PARAMS_KEY:
            if not keys:
                raise ParamsFileError(f"{path}: {PARAMS_KEY} must sit under a node name "
                                      f"(e.g. /**: {{{PARAMS_KEY}: ...}})")
            if value is not None and not isinstance(value, dict):
                raise ParamsFileError(f"{path}: {node}: {PARAMS_KEY} must be a mapping of names "
                                      f"to values, got {type(value).__name__}")
            out.setdefault(node, {}).update(_flatten(path, value or {}, ""))
        elif isinstance(value, dict):
            _collect(path, value, [*keys, key], out)  # a namespace, or a node name
        else:
            where = "/".join([*keys, key])
            raise ParamsFileError(f"{path}: '{where}' holds a value, not {PARAMS_KEY}: parameters go "
                                  f"under a node name (/**: {{{PARAMS_KEY}: {{{key}: ...}}}})")


def _flatten(path, mapping: dict, prefix: str) -> dict[str, Any]:
    flat = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ParamsFileError(f"{path}: parameter name {key!r} is not a string")
        if isinstance(value, dict) and value:
            flat.update(_flatten(path, value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = None if isinstance(value, dict) else value  # rcl: {} is no value
    return flat


def key_matches(key: str, fqn: str) -> bool:
    """Whether node key ``key`` applies to the node whose fully qualified name is ``fqn``: rcl's
    rule, a leading / implied, ``**`` any number of name parts, ``*`` exactly one."""
    parts = [p for p in key.split("/") if p]
    pattern = "".join("(/[^/]+)*" if p == "**" else "/[^/]+" if p == "*" else "/" + re.escape(p)
                      for p in parts)
    return re.fullmatch(pattern or "/", fqn) is not None


def parameters_for(path: str | Path, fqn: str) -> dict[str, Any]:
    """The parameters file ``path`` gives node ``fqn`` (later sections win, as in rcl);
    ParamsFileError when none of its node keys applies to that node."""
    sections = read_params_file(path)
    matching = [values for key, values in sections.items() if key_matches(key, fqn)]
    if not matching:
        keys = ", ".join(sections)
        name = fqn.rsplit("/", 1)[-1]
        raise ParamsFileError(f"{path}: none of its top-level keys ({keys}) matches node {fqn}; "
                              f"use /** or {name}")
    merged: dict[str, Any] = {}
    for values in matching:
        merged.update(values)
    return merged


def given_in_files(paths, fqn: str) -> dict[str, str]:
    """Parameter name -> the last of ``paths`` that gives it to node ``fqn`` (as rcl applies them)."""
    where = {}
    for path in paths:
        where.update(dict.fromkeys(parameters_for(path, fqn), str(path)))
    return where


def ros_params_files(argv) -> list[str]:
    """The files of ``--params-file`` in the ROS sections (``--ros-args`` ... ``--``) of ``argv``."""
    files, in_ros, args = [], False, list(argv or [])
    for i, arg in enumerate(args):
        if arg == "--ros-args":
            in_ros = True
        elif arg == "--":
            in_ros = False
        elif in_ros and arg == "--params-file" and i + 1 < len(args):
            files.append(args[i + 1])
    return files


def check_files_readable(argv) -> list[str]:
    """Every ``--params-file`` of ``argv`` read (before rclpy.init, whose parser would raise a
    multi-line RCLError); ParamsFileError for the first that cannot be used. Returns the files."""
    files = ros_params_files(argv)
    for path in files:
        read_params_file(path)
    return files

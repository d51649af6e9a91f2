"""No dead names in bevpool_ros. vulture (pinned in requirements.txt) reads the package, the
tests, the benchmarks and the scripts, so a name only they use counts as used; a name used where
vulture cannot see (TensorRT or rclpy calling it, a record read back as a dict) is listed, with
why, in dead_code_whitelist.py beside this file.

vulture matches by name alone, so a test that defines its own ``LABEL`` would keep the package's
``LABEL`` alive. A file outside the package therefore lends the package only the names it uses
without defining them itself (an import is a use, not a definition)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "bevpool_ros"
WHITELIST = Path(__file__).resolve().parent / "dead_code_whitelist.py"
USERS = ("test", "bench", "scripts")


def own_definitions(v) -> set[str]:
    """Every name a scavenged file defines, imports aside."""
    return {item.name for defined in (v.defined_attrs, v.defined_classes, v.defined_funcs, v.defined_methods,
                                      v.defined_props, v.defined_vars) for item in defined}


def names_lent_by(path: Path, vulture) -> set[str]:
    """The names ``path`` uses that it does not define: those can only be the package's."""
    v = vulture.Vulture()
    v.scavenge([str(path)])
    return set(v.used_names) - own_definitions(v)


def unused_in_package(vulture, package: Path, users: list[Path]) -> list[str]:
    v = vulture.Vulture()
    v.scavenge([str(package), str(WHITELIST)])
    for path in users:
        v.used_names |= names_lent_by(path, vulture)
    # 60: vulture's level for unused functions, classes, methods, attributes and variables
    return [item.get_report() for item in v.get_unused_code(min_confidence=60)]


def user_files() -> list[Path]:
    return [p for d in USERS for p in sorted((REPO / d).rglob("*.py")) if p != WHITELIST]


def test_nothing_in_the_package_is_unused():
    vulture = pytest.importorskip("vulture")
    dead = unused_in_package(vulture, PACKAGE, user_files())
    assert not dead, ("unused in bevpool_ros: delete it, or name it in test/dead_code_whitelist.py "
                      "with why\n" + "\n".join(dead))


def test_a_user_defining_the_same_name_does_not_keep_it_alive(tmp_path):
    """The package's ``LABEL`` is dead although a test defines and uses a ``LABEL`` of its own;
    a test that imports it keeps it alive."""
    vulture = pytest.importorskip("vulture")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "table.py").write_text('LABEL = {"v3": "V3 FP16"}\n')
    own = tmp_path / "test_own.py"
    own.write_text('import re\nLABEL = re.compile("x")\nprint(LABEL.pattern)\n')
    assert any("'LABEL'" in line for line in unused_in_package(vulture, package, [own]))
    importing = tmp_path / "test_importing.py"
    importing.write_text("from pkg.table import LABEL\nprint(LABEL)\n")
    assert unused_in_package(vulture, package, [own, importing]) == []

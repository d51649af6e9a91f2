"""bevpool-bag eval and eval-many against a rig that does not fit the bag: refused before a node
starts (exit 2, one line naming what differs and --rig, nothing written); the rig comes from the
params file's rig_file when --rig is absent."""
from __future__ import annotations

import pytest
import yaml

from bevpool_ros.bag.record import record_synthetic
from bevpool_ros.cli.bag import main
from bevpool_ros.paths import default_rig_path


@pytest.fixture(scope="module")
def bag(tmp_path_factory, nuscenes_rig):
    path = tmp_path_factory.mktemp("rigfit") / "nuscenes"
    record_synthetic(path, nuscenes_rig, frames=2)
    return path


def _rig_file(folder, name: str, **changes):
    rig = yaml.safe_load(default_rig_path().read_text())
    rig.update(changes, name=name)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(rig))
    return path


def _params_file(folder, **params):
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return path


def _refused(capsys, argv) -> str:
    """main(argv) refuses: exit 2, one line on stderr (returned), no traceback."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("changes, params, says", [
    ({"channels": 32}, {},
     "/cameras/CAM_FRONT/feat holds HWC [16, 44, 80], the rig expects [16, 44, 32]: 80 channels in the "
     "bag, 32 in the rig (channels)"),
    ({"depth_bins": {"start": 1.0, "stop": 60.0, "step": 0.5}}, {},
     "/cameras/CAM_FRONT/depth holds DHW [59, 16, 44], the rig expects [118, 16, 44]: 59 depth bins in "
     "the bag, 118 in the rig (depth_bins)"),
    ({"feature_stride": 8}, {},
     "16 feature rows in the bag, 32 in the rig (input.height / feature_stride), 44 feature columns in "
     "the bag, 88 in the rig (input.width / feature_stride)"),
    ({"image_size": [1920, 1080]}, {"calibration.use_camera_info": False},
     "/cameras/CAM_FRONT/camera_info is a 1600x900 camera, the rig's CAM_FRONT 1920x1080, and "
     "calibration.use_camera_info is false"),
])
def test_a_rig_that_does_not_fit_the_bag_is_refused_before_the_run(bag, tmp_path, capsys, changes,
                                                                   params, says):
    rig = _rig_file(tmp_path, "other", **changes)
    p = [a for k, v in params.items() for a in ("-p", f"{k}:={str(v).lower()}")]
    line = _refused(capsys, ["eval", bag, "--out", tmp_path / "out", "--rig", rig, *p])
    assert line.startswith(f"bevpool-bag eval: {bag}: rig other does not fit the bag: "), line
    assert says in line and "--rig RIG.yaml" in line, line
    assert not (tmp_path / "out").exists()
    line = _refused(capsys, ["eval-many", bag, "--out", tmp_path / "many", "--rig", rig, *p])
    assert says in line, line  # every bag checked before Ray starts
    assert not (tmp_path / "many").exists()


def test_a_camera_info_the_node_would_refuse_is_named(bag, tmp_path, capsys):
    """CameraInfo taken by the node (the default): one it would refuse (here a focal length of
    10 px: a 180-degree "pinhole") is named before the run, as the node would name it."""
    from bevpool_ros.bag.io import BagWriter, read_bag

    broken = tmp_path / "broken"
    with BagWriter(broken) as out:
        for m in read_bag(bag):
            msg = m.decode()
            if m.topic == "/cameras/CAM_BACK/camera_info":
                msg.k = [10.0, 0.0, 800.0, 0.0, 10.0, 450.0, 0.0, 0.0, 1.0]
            out.write(m.topic, msg, m.t_ns)
    line = _refused(capsys, ["eval", broken, "--out", tmp_path / "out"])
    assert "/cameras/CAM_BACK/camera_info (a 1600x900 camera) does not fit: " in line, line
    assert "field of view" in line, line


def test_the_params_files_rig_file_is_the_rig_when_rig_is_absent(bag, tmp_path, capsys):
    narrow = _rig_file(tmp_path, "narrow", channels=32)
    params = _params_file(tmp_path, rig_file=str(narrow), backend="cpu")
    line = _refused(capsys, ["eval", bag, "--out", tmp_path / "out", "--params-file", params])
    assert "rig narrow does not fit the bag" in line and "32 in the rig (channels)" in line, line
    # --rig wins over the file; -p rig_file naming another rig besides --rig is a contradiction
    line = _refused(capsys, ["eval", bag, "--out", tmp_path / "out", "--params-file", params,
                             "--rig", _rig_file(tmp_path, "other", channels=16)])
    assert "rig other does not fit" in line, line
    line = _refused(capsys, ["eval", bag, "--out", tmp_path / "out", "--rig", default_rig_path(),
                             "-p", f"rig_file:={narrow}"])
    assert "name different rigs" in line, line


def test_a_bag_of_other_cameras_names_rig(bag, tmp_path, capsys):
    cameras = yaml.safe_load(default_rig_path().read_text())["cameras"]
    renamed = [dict(c, name=f"front_{i}") for i, c in enumerate(cameras)]
    params = _params_file(tmp_path, rig_file=str(_rig_file(tmp_path, "robot", cameras=renamed)))
    line = _refused(capsys, ["eval", bag, "--out", tmp_path / "out", "--params-file", params])
    assert "no /cameras/front_0/depth" in line and "for rig robot" in line, line
    assert "--rig RIG.yaml, or rig_file in --params-file" in line, line

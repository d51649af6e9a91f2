"""The op inside a user's own network: insert into a small BEV model, build it end to end (TensorRT-RTX)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tensorrt_helpers import tiny_map, trt_rtx_or_skip

from bevpool_ros.backends.tensorrt.builder import build_engine, plugin_config_for
from bevpool_ros.backends.tensorrt.engine_check import check_engine_fields
from bevpool_ros.backends.tensorrt.network import NetworkError
from bevpool_ros.backends.tensorrt.onnx_insert import insert_bevpool, main
from bevpool_ros.backends.tensorrt.plugin_config import PLUGIN_NAME
from bevpool_ros.backends.tensorrt.targets import known_target

onnx = pytest.importorskip("onnx")
C_IN = 8


def user_model(smap, bev_layout: str):
    """Image features -> depth head (softmax over bins) + feature head (NCHW) ... BEV encoder (3x3 conv)
    reading a placeholder input ``bev_in``: the two halves of a BEVDet-style network."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    N, D, H, W = smap.depth_shape
    Z, Y, X = smap.grid_shape
    C = smap.channels
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array(rng.normal(0, 0.1, s).astype(np.float32))  # noqa: E731
    wd, wf = w(D, C_IN, 1, 1), w(C, C_IN, 1, 1)
    wd.name, wf.name = "w_depth", "w_feat"
    bev_shape = [Z, Y, X, C] if bev_layout == "ZYXC" else [1, Z * C, Y, X]
    enc_in = Z * C if bev_layout == "NCHW" else None
    nodes = [helper.make_node("Conv", ["image_feat", "w_depth"], ["depth_logits"], name="depth_head"),
             helper.make_node("Softmax", ["depth_logits"], ["depth"], axis=1, name="depth_softmax"),
             helper.make_node("Conv", ["image_feat", "w_feat"], ["context"], name="feat_head")]
    inits = [wd, wf]
    if bev_layout == "NCHW":
        we = w(16, enc_in, 3, 3)
        we.name = "w_enc"
        inits.append(we)
        nodes.append(helper.make_node("Conv", ["bev_in", "w_enc"], ["bev_out"], pads=[1, 1, 1, 1], name="bev_encoder"))
        out_shape = [1, 16, Y, X]
    else:
        nodes.append(helper.make_node("Relu", ["bev_in"], ["bev_out"], name="bev_encoder"))
        out_shape = bev_shape
    graph = helper.make_graph(
        nodes, "user_bev",
        [helper.make_tensor_value_info("image_feat", T.FLOAT, [N, C_IN, H, W]),
         helper.make_tensor_value_info("bev_in", T.FLOAT, bev_shape)],
        [helper.make_tensor_value_info("bev_out", T.FLOAT, out_shape),
         helper.make_tensor_value_info("depth", T.FLOAT, [N, D, H, W])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.fixture(scope="module")
def lib():
    return trt_rtx_or_skip()


@pytest.mark.parametrize("bev_layout", ["NCHW", "ZYXC"])
def test_full_network_with_the_op_builds_into_one_engine(lib, bev_layout):
    smap = tiny_map(channels=16)
    target = known_target("sm_89")
    cfg, _ = plugin_config_for(smap, "fp16", target)
    joined = insert_bevpool(user_model(smap, bev_layout), cfg, "depth", "context", "bev_in",
                            feat_layout="NCHW", bev_layout=bev_layout)
    ops = [n.op_type for n in joined.graph.node]
    assert ops.count(PLUGIN_NAME) == 1 and ops.index(PLUGIN_NAME) < ops.index("Conv" if bev_layout == "NCHW"
                                                                               else "Relu", 3)
    inputs = [i.name for i in joined.graph.input]
    assert inputs == ["image_feat", "slots", "pidx", "empty_cells"]  # the placeholder is gone
    built = build_engine(lib, cfg, target, onnx_model=joined.SerializeToString())
    assert check_engine_fields(lib, built.data, cfg) == cfg  # our plugin, with our fields, inside


def test_insert_refuses_unknown_tensors_and_name_clashes(lib):
    smap = tiny_map(channels=16)
    cfg, _ = plugin_config_for(smap, "fp16", known_target("sm_89"))
    model = user_model(smap, "ZYXC")
    with pytest.raises(NetworkError, match="no tensor"):
        insert_bevpool(model, cfg, "nope", "context", "bev_in", feat_layout="NCHW")
    with pytest.raises(NetworkError, match="not a graph input"):
        insert_bevpool(model, cfg, "depth", "context", "depth_logits", feat_layout="NCHW")
    model.graph.node[0].output[0] = "slots"
    model.graph.node[1].input[0] = "slots"
    with pytest.raises(NetworkError, match="already uses"):
        insert_bevpool(model, cfg, "depth", "context", "bev_in", feat_layout="NCHW")


def test_cli_writes_the_model_and_the_engine(lib, tmp_path, capsys):
    from bevpool_ros.workloads import get_workload

    smap = get_workload("small")
    src = tmp_path / "user.onnx"
    onnx.save(user_model(smap, "NCHW"), src)
    code = main([str(src), str(tmp_path / "joined.onnx"), "--workload", "small", "--depth", "depth",
                 "--feat", "context", "--feat-layout", "NCHW", "--bev", "bev_in", "--bev-layout", "NCHW",
                 "--arch", "sm_120", "--engine", str(tmp_path / "bev.engine")])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["bytes"] == (tmp_path / "bev.engine").stat().st_size > 0
    assert set(report["map_inputs"]) == {"slots", "pidx", "empty_cells"}
    assert onnx.load(tmp_path / "joined.onnx").graph.node

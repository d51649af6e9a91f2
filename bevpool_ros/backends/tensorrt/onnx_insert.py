"""Put the BEVPool custom op inside a user's own ONNX network, so a whole BEV model is one engine.

A typical BEV network is exported in two halves around the view transform: image backbone +
depth/feature heads, then a BEV encoder that starts from a placeholder input. ``insert_bevpool``
joins them: it feeds the heads' ``depth`` [N,D,H,W] and ``feat`` ([N,H,W,C] or [N,C,H,W]) tensors
into one ``BEVPoolV3`` node (casting to the plugin's input dtype, transposing NCHW features) and
makes the node's grid the tensor the encoder already reads (``bev``: replaced graph input), as
[Z,Y,X,C] or, for 2-D encoders, [1, Z*C, Y, X]. The map arrays (slots, pidx, empty_cells) become
graph inputs with a free leading dimension; the engine builder bounds them with one optimisation
profile (PluginConfig.profile), so the engine serves every calibration of the rig.

The op: domain "" (default), op type ``BEVPoolV3``, version "1", attributes = the plugin fields
(docs/tensorrt.md lists them). Build such a model with ``build_engine(lib, cfg, target,
onnx_model=...)``; at run time register the plugin (plugin.register_plugin) and bind the map
arrays of the current calibration (plugin_config.map_inputs).
"""
from __future__ import annotations

from .network import NetworkError, onnx_elem_types, onnx_map_inputs, onnx_module, onnx_plugin_node
from .plugin_config import PluginConfig

FEAT_LAYOUTS = ("NHWC", "NCHW")
BEV_LAYOUTS = ("ZYXC", "NCHW")


def insert_bevpool(model, cfg: PluginConfig, depth: str, feat: str, bev: str, *, feat_layout: str = "NHWC",
                   bev_layout: str = "ZYXC", name: str = "bevpool"):
    """A copy of ``model`` (onnx.ModelProto) with the BEVPool node between its heads and its encoder.

    ``depth``/``feat``: tensors the model computes (or takes as inputs); ``bev``: the graph input
    the BEV encoder reads, replaced by the pooled grid (cast to that input's element type).
    """
    onnx = onnx_module()
    helper, T = onnx.helper, onnx.TensorProto
    if feat_layout not in FEAT_LAYOUTS or bev_layout not in BEV_LAYOUTS:
        raise NetworkError(f"feat_layout in {FEAT_LAYOUTS}, bev_layout in {BEV_LAYOUTS}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    produced = {o for n in g.node for o in n.output} | {i.name for i in g.input}
    for tensor in (depth, feat):
        if tensor not in produced:
            raise NetworkError(f"the model has no tensor {tensor!r}")
    bev_input = next((i for i in g.input if i.name == bev), None)
    if bev_input is None:
        raise NetworkError(f"{bev!r} is not a graph input of the model (the encoder's placeholder)")
    taken = {*produced, *(n.name for n in g.node)}
    clash = [n for n in cfg.inputs[2:] if n in taken]
    if clash:
        raise NetworkError(f"the model already uses the names {clash}")
    want = onnx_elem_types()[cfg.input_dtype]
    nodes = []

    def add(op, inputs, suffix, **attrs):
        tensor = f"{name}/{suffix}"
        nodes.append(helper.make_node(op, inputs, [tensor], name=tensor, **attrs))
        return tensor

    d = add("Cast", [depth], "depth_in", to=want)
    f = add("Cast", [feat], "feat_cast", to=want)
    if feat_layout == "NCHW":
        f = add("Transpose", [f], "feat_in", perm=[0, 2, 3, 1])
    grid = f"{name}/grid"
    nodes.append(onnx_plugin_node(cfg, d, f, grid, name=name))
    z, y, x = cfg.grid_shape
    if bev_layout == "NCHW":  # 2-D encoders: height layers folded into channels, as BEVDet does
        grid = add("Transpose", [grid], "zcyx", perm=[0, 3, 1, 2])
        shape = helper.make_tensor(f"{name}/nchw_shape", T.INT64, [4], [1, z * cfg.channels, y, x])
        g.initializer.append(shape)
        grid = add("Reshape", [grid, shape.name], "nchw")
    nodes.append(helper.make_node("Cast", [grid], [bev], name=f"{name}/bev_out",
                                  to=bev_input.type.tensor_type.elem_type))
    g.input.remove(bev_input)
    g.input.extend(onnx_map_inputs(cfg))
    first_use = min((i for i, n in enumerate(g.node) if bev in n.input), default=len(g.node))
    for i, node in enumerate(nodes):  # keep the node list topologically sorted
        g.node.insert(first_use + i, node)
    return out  # (onnx.checker refuses custom ops in the default domain, which TensorRT's parser uses)


def main(argv=None) -> int:
    """bevpool-onnx-insert: insert the op into a model file; optionally build the whole engine."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("model", help="the user's ONNX model")
    ap.add_argument("out", help="where the joined model goes")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rig", help="rig YAML (config/rigs/...): shapes, grid, and one calibration")
    src.add_argument("--workload", help="named workload (bevpool_ros.workloads)")
    ap.add_argument("--depth", required=True, help="tensor name of the depth head's output [N,D,H,W]")
    ap.add_argument("--feat", required=True, help="tensor name of the feature head's output")
    ap.add_argument("--bev", required=True, help="graph input of the BEV encoder to replace")
    ap.add_argument("--feat-layout", default="NHWC", choices=FEAT_LAYOUTS)
    ap.add_argument("--bev-layout", default="ZYXC", choices=BEV_LAYOUTS)
    ap.add_argument("--precision", default="fp16", choices=("fp16", "fp8"))
    ap.add_argument("--arch", default="sm_89", help="target compute capability (kernel choice, AOT build)")
    ap.add_argument("--engine", help="also build the whole network into this engine file (TensorRT-RTX: AOT)")
    args = ap.parse_args(argv)
    from .prebuild import map_or_none

    smap = map_or_none(args, "bevpool-onnx-insert")
    if smap is None:
        return 2
    try:
        from .builder import build_engine, plugin_config_for
        from .targets import known_target

        onnx = onnx_module()
        target = known_target(args.arch)
        cfg, _ = plugin_config_for(smap, args.precision, target)
        joined = insert_bevpool(onnx.load(args.model), cfg, args.depth, args.feat, args.bev,
                                feat_layout=args.feat_layout, bev_layout=args.bev_layout)
        onnx.save(joined, args.out)
        report = {"model": args.out, "map_inputs": {n: [list(s) for s in cfg.profile(n)] for n in cfg.inputs[2:]},
                  "kernel": cfg.plan.kernel}
        if args.engine:
            from .trt_import import load_tensorrt

            built = build_engine(load_tensorrt(), cfg, target, onnx_model=joined.SerializeToString())
            with open(args.engine, "wb") as fh:
                fh.write(built.data)
            report.update(engine=args.engine, bytes=len(built.data))
    except (ImportError, OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"bevpool-onnx-insert failed: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

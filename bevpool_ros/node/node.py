"""bevpool_node: camera topics -> synchronised set -> BEV pooling -> BevFeature (+ image,
diagnostics).

A managed (lifecycle) node; the work lives in library modules, this class only orders it:
  configure   parameters read and checked, rig loaded, backend created and prepared (scatter map
              built, kernels compiled or engines loaded), publishers made (configure.py)
  activate    input subscriptions (inputs.py), publishing on (publishing.py)
  deactivate  subscriptions gone, queued sets dropped; backend, map and publishers stay warm
  cleanup     backend, pooling thread, publishers and timers released
  shutdown    from any state, releases whatever is held
With ``autostart`` (default) the node configures and activates itself, as before; without it a
lifecycle manager drives it over ``<node>/change_state``. Parameters: parameters.py; counters and
/diagnostics: reporting.py.
"""
from __future__ import annotations

import os

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

from .. import heap
from ..logtext import clip, shown
from ..params.files import ros_params_files
from ..ros import dds_guard
from ..ros.liveness import long_step
from ..ros.process import reader_memory_policy
from . import configure
from .configure import StartupError
from .graph_watch import PublisherWatch
from .handoff_input import handoff_topics
from .inputs import Inputs
from .memory import memory_ceiling, memory_status, per_writer_bytes
from .parameters import (
    RuntimeParameters,
    configured_values,
    declare_all,
    declare_extrinsics,
    undeclared_reason,
)
from .pooling import PoolingWorker
from .publishing import Outputs
from .reporting import Report, backend_status

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
INPUT_TYPES = {"depth": "bevpool_msgs/msg/CameraTensor", "feat": "bevpool_msgs/msg/CameraTensor",
               "image": "sensor_msgs/msg/Image", "camera_info": "sensor_msgs/msg/CameraInfo",
               "handoff": "bevpool_msgs/msg/TensorHandoff"}


class BevPoolNode(LifecycleNode):
    def __init__(self, node_name: str = "bevpool_node", input_guard=None, params_files=(), **kwargs):
        """``input_guard(topics, depth) -> str``: told the resolved input tensor topics before
        anything heavy starts; says how their size is bounded (main.input_size_guard), or raises.
        ``params_files``: the process's --params-file files (its own ``cli_args`` are read here),
        whose names configure checks as it checks every override's."""
        super().__init__(node_name, **kwargs)
        self.params_files = [*params_files, *ros_params_files(kwargs.get("cli_args"))]
        self.cfg = self.calibration = self.backend = self.worker = None
        self.inputs = self.outputs = self.watch = self.launch = None
        self.cameras: tuple = ()
        self.active = False
        self.memory_at_start: int | None = None  # resident bytes once active (the ceiling is above it)
        self._ceiling = None  # (MemoryCeiling, bytes per further writer): worked out once per activation
        self.backend_requested = ""
        self.report = Report(self)
        self.params = RuntimeParameters(self)
        declare_all(self)
        self.add_on_set_parameters_callback(self.params.validate)
        self.add_post_set_parameters_callback(self.params.apply)
        self.autostart = bool(self.get_parameter("autostart").value)
        self.input_size_guard = "node only (no guard asked)"
        self.executor_kind = "the caller's"  # node/main.py names the one it made (ros/executor.py)
        self._guarded = None  # (topics, depth) the guard was asked about at start
        self._failure = ""
        self._starting = False
        if input_guard is not None:
            self._ask_input_guard(input_guard)
        self._starting = self.autostart
        if self.autostart:
            for step in (self.trigger_configure, self.trigger_activate):
                if step() != SUCCESS:
                    raise StartupError(self._failure or f"{step.__name__} failed")
            self._starting = False
        else:
            self.get_logger().info("unconfigured, waiting for a lifecycle manager "
                                   "(autostart false)")

    # properties the tools and tests read ------------------------------------------------------
    @property
    def counts(self):
        return self.report.counts

    @property
    def state_label(self) -> str:
        return self._state_machine.current_state[1]

    @property
    def input_thread(self):
        """The thread taking the input tensors beside the executor (the watchdog watches it), or None."""
        return getattr(self.inputs, "thread", None)

    @property
    def handoff_thread(self):
        """The hand-off core's set loop (handoff_sets.SetLoopIntake; the watchdog watches it), or None."""
        handoff = getattr(self.inputs, "handoff", None)
        return getattr(handoff, "intake", None)

    def snapshot(self) -> dict:
        return self.report.snapshot()

    def status(self) -> dict:
        """The node's own /diagnostics values (its components report theirs: Report.compose)."""
        values = {"state": self.state_label, "input_size_guard": self.input_size_guard,
                  "executor": self.executor_kind, "heap": heap.state, "dds_reader_memory": reader_memory_policy(),
                  "pid": os.getpid()}  # which process this is: two graphs may share a domain by mistake
        if self.active and self.inputs is not None and self._ceiling is not None:
            values.update(memory_status(*self._ceiling, self.inputs.most_writers(), self.memory_at_start))
        return values

    # transitions ------------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        try:
            with long_step("configuring"):  # kernels compiled, engines built: not a stall
                self._configure()
        except Exception as e:  # rclpy would turn it into a silent ERROR: say it, stay unconfigured
            self._failure = str(e) if isinstance(e, StartupError) else f"{type(e).__name__}: {e}"
            if not self._starting:  # at start-up main prints it (one line, exit 2)
                self.get_logger().error(clip(f"configure failed: {self._failure}", 600))
            self._release()
            return FAILURE
        return SUCCESS

    def _configure(self) -> None:
        cfg = self.cfg = configured_values(self, self.params_files)
        self.report.warn.period = cfg["log_throttle_s"]
        self.report.windows(cfg["diagnostics.latency_window"])
        self.calibration = configure.load_calibration(cfg)
        self.cameras = self.calibration.camera_names
        depth_images = configure.depth_image_inputs(cfg, self.calibration)
        self.input_size_guard = self._guard_state(cfg, depth_images)
        declare_extrinsics(self, self.calibration)
        self.backend, self.backend_requested = configure.make_backend(cfg, self.get_logger())
        self.inputs = Inputs(self, depth_images, cfg=cfg, cameras=self.cameras, calibration=self.calibration,
                             report=self.report, backend=self._backend_now, deliver=self._deliver,
                             wait_for_worker=self._wait_for_worker)
        self.outputs = Outputs(self, cfg=cfg, report=self.report, backend=self._backend_now)
        self.worker = PoolingWorker(
            self.backend, self.calibration, self.outputs.publish, self.report.drop,
            cfg["processing.queue_size"], on_rebuild=self._on_rebuild,
            out_dtype=lambda: self.cfg["output.bev_dtype"], out_buffer=self.outputs.payload,
            on_prepare_error=self._cpu_instead, host_grid=self.outputs.host_grid_needed,
            warm_device_inputs=cfg["input.handoff"] != "none", on_warning=self.report.warn)
        self.report.compose(self.status, lambda: backend_status(self._backend_now(), self.backend_requested),
                            self.calibration.status, self.inputs.status, self.worker.status, self.outputs.status,
                            lambda: self.launch.status() if self.launch is not None else {})
        self.worker.start()  # prepares the backend: the map, kernels or engines, before any data
        self.outputs.start_handoff(self.backend)
        self.launch = self._core_launch(cfg)
        self.report.start(cfg["diagnostics.period_s"])

    def on_activate(self, state) -> TransitionCallbackReturn:
        super().on_activate(state)  # lifecycle publishers on
        self.active = True
        try:
            self.inputs.subscribe()
            self.watch = PublisherWatch(self, self._input_types(), self.report, self.inputs.publishers_left)
            self.watch.check()
        except Exception as e:  # rclpy would turn it into a silent ERROR: say it, stay inactive
            self._failure = f"activate failed: {type(e).__name__}: {e}"
            self.get_logger().error(clip(self._failure, 600))
            self._stop_input()
            super().on_deactivate(state)
            return FAILURE
        cfg, rig, d = self.cfg, self.calibration.rig, self.backend.describe()
        self.get_logger().info(
            f"ready: {len(self.cameras)} cameras {list(self.cameras)}, rig {rig.name}, "
            f"backend {d.get('backend')} ({d.get('precision')}), grid {rig.grid_shape} "
            f"x {rig.channels} ch, sync slop {cfg['sync.slop_s']} s, "
            f"timeout {cfg['sync.camera_timeout_s']} s, "
            f"policy {cfg['sync.missing_camera_policy']}, "
            f"input size bounded by: {self.input_size_guard}")
        self.memory_at_start = heap.resident_bytes()  # the memory ceiling is counted above it
        self._ceiling = (memory_ceiling(rig, cfg), per_writer_bytes(rig))
        return SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self._stop_input()
        super().on_deactivate(state)
        self.get_logger().info("inactive: input unsubscribed, backend and map kept")
        return SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self._release()
        self.get_logger().info("unconfigured: backend, pooling thread and publishers released")
        return SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        self._release()
        return SUCCESS

    def on_error(self, state) -> TransitionCallbackReturn:
        self._release()
        return SUCCESS  # back to unconfigured: a manager may configure again

    def _stop_input(self) -> None:
        self.active = False
        if self.launch is not None:  # before the inputs go: no set launched by the core after this
            self.launch.stop()
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        if self.inputs is not None:
            self.inputs.unsubscribe()
        if self.worker is not None:
            self.worker.discard_queued()

    def _release(self) -> None:
        """Whatever configure made, in reverse; safe on a half-configured node."""
        self._stop_input()
        self.report.stop()
        if self.worker is not None:
            self.worker.stop()
        if self.launch is not None:
            self.launch.close()
        if self.inputs is not None:
            self.inputs.close()
        if self.outputs is not None:
            self.outputs.close()
        if self.backend is not None:
            self.backend.close()
        self.worker = self.inputs = self.outputs = self.backend = self.cfg = self.launch = None

    def destroy_node(self):
        # also called by rclpy's context cleanup on a node whose __init__ failed half-way
        if getattr(self, "report", None) is not None:
            self._release()
        done = super().destroy_node()
        # rclpy's LifecycleNode leaves its state machine (which holds the node handle) to the
        # garbage collector: the context stayed in use, and on Python 3.12 (kilted wheels) its DDS
        # participant was never deleted, leaving 2 x 64 MiB in /dev/shm after every clean stop
        machine = getattr(self, "_state_machine", None)
        if machine is not None:
            machine.destroy_when_not_in_use()
        return done

    # configure helpers ------------------------------------------------------------------------
    def _ask_input_guard(self, input_guard) -> None:
        """Before anything heavy: the guard may re-execute the process with a DDS profile that
        bounds these topics. A configuration that cannot load is left to configure to report."""
        try:
            cfg = configured_values(self, self.params_files)
            calib = configure.load_calibration(cfg)
            depth_images = configure.depth_image_inputs(cfg, calib)
        except StartupError:
            if self.autostart:
                raise
            return
        topics = self._camera_tensor_topics(cfg, calib.camera_names, depth_images)
        depth = cfg["input.qos_depth"]
        try:
            self.input_size_guard = input_guard(topics, depth)
        except BaseException:  # e.g. a restart with another DDS profile: leave the graph first, so
            super().destroy_node()  # peers never match this process's services (a dead server
            raise                   # answered nothing: a lifecycle manager's first call hung)
        self._guarded = (sorted(topics), depth)

    def _guard_state(self, cfg, depth_images) -> str:
        topics = self._camera_tensor_topics(cfg, self.cameras, depth_images)
        if self._guarded is None or self._guarded == (sorted(topics), cfg["input.qos_depth"]):
            return self.input_size_guard
        if dds_guard.is_guarded(topics, cfg["input.qos_depth"]):
            return "dds"
        return ("node only (input topics changed after start: restart bevpool_node to bound them "
                "by DDS)")

    def _camera_tensor_topics(self, cfg, cameras, depth_images) -> list[str]:
        relative = configure.camera_tensor_topics(cfg, cameras, depth_images)
        return [self.resolve_topic_name(t) for t in relative]

    def _input_types(self) -> dict[str, tuple]:
        """Every input topic -> (its type, the subscription's QoS; None for CameraInfo, whose
        sensor-data QoS every publisher matches)."""
        from ..ros.qos import make_qos

        topics = {}
        qos = make_qos(self.cfg["input.qos_reliability"], self.cfg["input.qos_depth"])
        handoff_only = (self.cfg["input.handoff"] == "only"
                        and not self.inputs.uses_message_filters)
        for (cam, stream), t in configure.tensor_topics(self.cfg, self.cameras).items():
            image = stream == "depth" and cam in self.inputs.depth_images
            if not image and handoff_only:
                continue  # not subscribed: the hand-off topics carry these streams
            topics[self.resolve_topic_name(t)] = (INPUT_TYPES["image" if image else stream], qos)
        for t in handoff_topics(self.cfg, self.cameras).values():
            topics[self.resolve_topic_name(t)] = (INPUT_TYPES["handoff"], qos)
        for cam in self.cameras:
            topic = self.cfg["input.camera_info_topic"].format(camera=cam)
            topics[self.resolve_topic_name(topic)] = (INPUT_TYPES["camera_info"], None)
        return topics

    def _deliver(self, camera_set, inline: bool = False):
        """A complete set (inputs, under their hand-over lock): to the pooling thread, unless no one
        would receive the grid (the image_pipeline rule). ``inline``: the job that pools it in the
        calling thread comes back when the pooling thread is idle (PoolingWorker.reserve_or_submit),
        for the caller to run once it released the lock; else None."""
        if not self.active:
            return None  # a callback already queued when deactivate ran
        if self.cfg["processing.skip_without_subscribers"] and not self.outputs.anyone_listening():
            self.report.count("skipped_no_subscribers")
            return None
        if inline:
            return self.worker.reserve_or_submit(camera_set)
        self.worker.submit(camera_set)
        return None

    def _backend_now(self):
        """The backend as it is now: the pooling thread's prepare may replace it (_cpu_instead)."""
        return self.backend

    def _wait_for_worker(self, timeout_s: float) -> None:
        worker = self.worker
        if worker is not None:
            worker.wait_until_idle(timeout_s)

    def after_set(self, job) -> None:
        """``job`` where it delays no set: the pooling thread after one (PoolingWorker.after_set);
        now when no worker runs (configuring, cleaned up)."""
        worker = getattr(self, "worker", None)
        if worker is None:
            job()
        else:
            worker.after_set(job)

    def _cpu_instead(self, backend, error: Exception, rig):
        self.backend = configure.cpu_instead(self.cfg, self.get_logger(), backend, error, rig)
        return self.backend

    def _core_launch(self, cfg):
        """The hand-off core's launcher of all-hand-off sets (node/handoff_launch.py), where the core
        runs the node's set loop and the output hand-off is on; else None."""
        handoff = self.inputs.handoff
        intake = handoff.intake if handoff is not None else None
        if intake is None or self.outputs.handoff is None:
            return None
        from .handoff_launch import CoreLaunch

        return CoreLaunch(intake.loop.lib, intake=intake, inputs=handoff, worker=self.worker, outputs=self.outputs,
                          calibration=self.calibration, ego_frame=cfg["ego_frame"],
                          out_dtype=lambda: self.cfg["output.bev_dtype"], active=lambda: self.active,
                          wanted=lambda: (not self.cfg["processing.skip_without_subscribers"]
                                          or self.outputs.anyone_listening()),
                          warn=self.report.warn)

    def _on_rebuild(self, rig) -> None:
        if self.launch is not None:  # its graphs and grid were the old frame's
            self.launch.teardown()
        self.report.count("scatter_map_rebuilds")
        self.get_logger().info(f"scatter map rebuilt for calibration {rig.digest()}")

    # parameters -------------------------------------------------------------------------------
    def reconfigure(self, names: set) -> None:
        """Apply run-time parameter changes (cfg already holds the new values)."""
        from .parameters import SYNC_PARAMS

        cfg = self.cfg
        if names & set(SYNC_PARAMS):
            self.inputs.reconfigure_sync()
        if "processing.queue_size" in names:
            self.worker.queue_size = cfg["processing.queue_size"]
        if "diagnostics.latency_window" in names:
            self.report.resize(cfg["diagnostics.latency_window"])
        if "diagnostics.period_s" in names:
            self.report.set_period(cfg["diagnostics.period_s"])
        if "log_throttle_s" in names:
            self.report.warn.period = cfg["log_throttle_s"]

    def set_parameters_atomically(self, parameter_list):
        """Every change is logged, each one (not throttled: changes are rare and an operator wants
        each answer): accepted ones with their new values; rejections (undeclared name; by the
        descriptors: type, range; or by the node's rules) counted, with a reason that names the
        parameter. The parameter services and set_parameters() all come through here."""
        undeclared = [p.name for p in parameter_list if not self.has_parameter(p.name)]
        if undeclared:
            result = SetParametersResult(successful=False, reason=undeclared_reason(undeclared))
        else:
            result = super().set_parameters_atomically(parameter_list)
            if not result.successful:
                result.reason = self.params.readable_rejection(parameter_list, result.reason)
        if result.successful:
            changes = ", ".join(f"{p.name} := {shown(p.value)}" for p in parameter_list)
            self.get_logger().info(f"parameter change accepted: {clip(changes, 300)}")
        else:
            self.report.count("parameter_rejected")
            self.get_logger().warning(f"parameter change rejected: {clip(result.reason, 300)}")
        return result

    def set_parameters(self, parameter_list):
        return [self.set_parameters_atomically([p]) for p in parameter_list]

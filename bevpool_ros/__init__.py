"""bevpool_ros: BEV pooling as a ROS 2 node, and in-process (``bevpool_ros.BevPooler``)."""


def __getattr__(name):  # imported on first use: ``import bevpool_ros.x`` stays light
    if name == "BevPooler":
        from .inprocess import BevPooler

        return BevPooler
    raise AttributeError(name)


__all__ = ["BevPooler"]

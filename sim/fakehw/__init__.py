"""Fake GB10 (DGX Spark) hardware for the dspark simulator.

There is no GPU and no ConnectX/RoCE NIC on the simulation host, so each
simulated rank gets two small JSON state files (``gpu.json`` and ``ib.json``)
in its hardware directory (``$DSPARK_SIM_HW_DIR``, default
``/var/lib/dspark-sim/hw``).  The fake ``nvidia-smi`` and ``ibdev2netdev``
tools in ``bin/`` answer from those files, and :mod:`fakehw.sysfs` mirrors the
link state into a fake ``/sys/class/infiniband`` tree.

Only the Python standard library is used: the tools run under Debian's
``/usr/bin/python3`` inside the rank namespaces.
"""

__all__ = ["state", "nvidia_smi", "ibdev2netdev", "sysfs"]

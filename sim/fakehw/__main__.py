"""Change a rank's fake hardware state.

    python3 -m fakehw [--hw-dir DIR] [--sysfs-root ROOT] COMMAND ...

    init --hca HCA --netdev NETDEV [--twin-hca HCA2 --twin-netdev NETDEV2 | --no-twin]
         [--port P] [--state auto|Up|Down] [--seed N] [--profile gb10|h200]
    set-link HCA auto|Up|Down [--port P]
    set-gpu [--profile gb10|h200] [--seed N] [--index I] [--field KEY=VALUE ...] [--count N]
    show
    sysfs --root ROOT

``--hw-dir`` defaults to $DSPARK_SIM_HW_DIR (else /var/lib/dspark-sim/hw).
With ``--sysfs-root`` (or $DSPARK_SIM_SYSFS_ROOT) the fake /sys/class/infiniband
tree under that root is regenerated after init and set-link.  Without
--twin-* options, init derives the twin logical port from Spark-style names
(rocep1s0f1/enp1s0f1np1 -> roceP2p1s0f1/enP2p1s0f1np1).

Exit status: 0 ok, 1 state error, 2 usage error.
"""

import argparse
import json
import os
import sys

from . import state as hwstate
from . import sysfs

ENV_SYSFS_ROOT = "DSPARK_SIM_SYSFS_ROOT"


def _profile_state(profile, seed):
    if profile == "gb10":
        return hwstate.default_gb10_gpu_state(seed)
    st = hwstate.h200_state()
    st["sim_seed"] = seed
    return st


def _seed(text):
    return hwstate.coerce_field("sim_seed", text)


def _regen(args):
    root = args.sysfs_root or os.environ.get(ENV_SYSFS_ROOT)
    if root:
        sysfs.materialise_from_hw_dir(root, args.hw_dir)


def cmd_init(args):
    twin_hca, twin_netdev = args.twin_hca, args.twin_netdev
    if (twin_hca is None) != (twin_netdev is None):
        raise hwstate.StateError("--twin-hca and --twin-netdev must be given together")
    if twin_hca is None and not args.no_twin:
        twin = hwstate.twin_names(args.hca, args.netdev)
        if twin:
            twin_hca, twin_netdev = twin
    gpu = _profile_state(args.profile, args.seed)
    ib = hwstate.default_ib_state(args.hca, args.netdev, twin_hca, twin_netdev,
                                  port=args.port, state=args.state)
    hwstate.write_gpu_state(args.hw_dir, gpu)
    hwstate.write_ib_state(args.hw_dir, ib)
    _regen(args)
    return 0


def cmd_set_link(args):
    ib = hwstate.load_ib_state(args.hw_dir)
    ib = hwstate.set_link_state(ib, args.hca, args.state, args.port)
    hwstate.write_ib_state(args.hw_dir, ib)
    _regen(args)
    return 0


def cmd_set_gpu(args):
    if args.profile is None and not args.field and args.count is None:
        raise UsageError("set-gpu: give --profile, --field or --count")
    try:
        current = hwstate.load_gpu_state(args.hw_dir)
    except hwstate.StateMissing:
        current = None
    if args.profile is not None:
        seed = args.seed
        if seed is None:
            seed = current.get("sim_seed") if current else None
        if seed is None:
            seed = 0
        new = _profile_state(args.profile, seed)
    elif current is None:
        raise hwstate.StateError("no %s in %s: run init or give --profile"
                                 % (hwstate.GPU_FILE, hwstate.hw_dir(args.hw_dir)))
    else:
        new = current
    for item in args.field or []:
        if "=" not in item:
            raise UsageError("--field expects KEY=VALUE, got %r" % item)
        key, text = item.split("=", 1)
        key = key.strip()
        new = hwstate.set_gpu_field(new, key, hwstate.coerce_field(key, text), args.index)
    if args.count is not None:
        if args.count < 0 or args.count > len(new["gpus"]):
            raise hwstate.StateError("--count must be between 0 and %d" % len(new["gpus"]))
        new = dict(new, gpus=new["gpus"][:args.count])
    hwstate.write_gpu_state(args.hw_dir, new)
    return 0


def cmd_show(args):
    out = {}
    for name, loader in (("gpu", hwstate.load_gpu_state), ("ib", hwstate.load_ib_state)):
        try:
            out[name] = loader(args.hw_dir)
        except hwstate.StateMissing:
            out[name] = None
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def cmd_sysfs(args):
    written = sysfs.materialise_from_hw_dir(args.root, args.hw_dir)
    for (hca, port), link in sorted(written.items()):
        sys.stdout.write("%s port %d %s\n" % (hca, port, link))
    return 0


class UsageError(Exception):
    pass


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--hw-dir", default=argparse.SUPPRESS,
                        help="state directory (default: $%s or %s)"
                        % (hwstate.ENV_HW_DIR, hwstate.DEFAULT_HW_DIR))
    common.add_argument("--sysfs-root", default=argparse.SUPPRESS,
                        help="regenerate ROOT/sys/class/infiniband after link changes "
                        "(default: $%s)" % ENV_SYSFS_ROOT)
    p = argparse.ArgumentParser(prog="python3 -m fakehw", parents=[common],
                                description="Change a simulated DGX Spark rank's fake GPU/RoCE state.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("init", parents=[common], help="write default gpu.json and ib.json")
    s.add_argument("--hca", required=True)
    s.add_argument("--netdev", required=True)
    s.add_argument("--twin-hca")
    s.add_argument("--twin-netdev")
    s.add_argument("--no-twin", action="store_true", help="do not derive a twin logical port")
    s.add_argument("--port", type=int, default=1)
    s.add_argument("--state", default="auto", choices=hwstate.LINK_STATES)
    s.add_argument("--seed", type=_seed, default=0, help="rank seed for GPU identity")
    s.add_argument("--profile", choices=("gb10", "h200"), default="gb10")
    s.set_defaults(func=cmd_init)

    s = sub.add_parser("set-link", parents=[common], help="set a RoCE device's link state")
    s.add_argument("hca")
    s.add_argument("state", type=lambda v: {x.lower(): x for x in hwstate.LINK_STATES}.get(v.lower(), v),
                   choices=hwstate.LINK_STATES)
    s.add_argument("--port", type=int)
    s.set_defaults(func=cmd_set_link)

    s = sub.add_parser("set-gpu", parents=[common], help="change the fake GPU")
    s.add_argument("--profile", choices=("gb10", "h200"))
    s.add_argument("--seed", type=_seed)
    s.add_argument("--index", type=int, default=0)
    s.add_argument("--field", action="append", metavar="KEY=VALUE")
    s.add_argument("--count", type=int, help="keep only the first N GPUs (0: no devices)")
    s.set_defaults(func=cmd_set_gpu)

    s = sub.add_parser("show", parents=[common], help="print the state as JSON")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("sysfs", parents=[common], help="materialise the fake sysfs tree")
    s.add_argument("--root", required=True)
    s.set_defaults(func=cmd_sysfs)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    args.hw_dir = hwstate.hw_dir(getattr(args, "hw_dir", None))
    args.sysfs_root = getattr(args, "sysfs_root", None)
    try:
        return args.func(args)
    except UsageError as exc:
        sys.stderr.write("fakehw: %s\n" % exc)
        return 2
    except (hwstate.StateError, OSError) as exc:
        sys.stderr.write("fakehw: %s\n" % exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())

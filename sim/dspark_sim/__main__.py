"""``python -m dspark_sim up|down|status|image|leftovers`` (the Makefile's sim-* targets)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from . import checkpoint, fleet, image, layout
from .proc import SimError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dspark-sim", description="GB10 pair simulator")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring N simulated pairs up and write inventories/sim")
    p_up.add_argument("--pairs", type=int, default=1)
    p_up.add_argument("--fleet2", type=int, default=0, metavar="N",
                      help="N more pairs after them, a second fleet of its own: inventories/sim-fleet2, with its "
                           "own evidence folder (artifacts/evidence-fleet2)")
    sub.add_parser("down", help="remove every simulator namespace, process, link, rule and mount")
    sub.add_parser("status", help="print the simulator's state as JSON")
    sub.add_parser("image", help="build (or reuse) the stand-in image archive and print its identity")
    sub.add_parser("leftovers", help="list anything of the simulator left on the host; exit 1 if any")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("dspark-sim: must run as root (namespaces, bridges, dockerd)", file=sys.stderr)
        return 2
    try:
        if args.cmd == "up":
            st = fleet.up(args.pairs, args.fleet2)
            print(f"simulator up: {st['pairs']} pair(s), inventory {st['inventory']}"
                  + (f" ({args.fleet2} of them in {layout.FLEET2_INVENTORY_DIR})" if args.fleet2 else ""))
            for name in st["ranks"]:
                print(f"  {name}")
        elif args.cmd == "down":
            fleet.down()
            left = fleet.leftovers()
            if left:
                print("left behind:\n  " + "\n  ".join(left), file=sys.stderr)
                return 1
            print("simulator down: nothing left behind")
        elif args.cmd == "status":
            print(json.dumps(fleet.status(), indent=2))
        elif args.cmd == "image":
            print(json.dumps(image.build(checkpoint.MODEL_REVISION), indent=2))
        elif args.cmd == "leftovers":
            left = fleet.leftovers()
            print("\n".join(left) if left else "nothing left behind")
            return 1 if left else 0
    except SimError as exc:
        print(f"dspark-sim: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

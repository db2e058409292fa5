"""A trainer that talks to NVRx's rank monitor itself, as NVRx's example trainers do (it imports only NVRx).

Launched by ft_launcher, it connects to its rank monitor, prints the heartbeat timeouts the launcher's
config gave it, then, with ``--ft-state FILE`` (a RankMonitorClient state_dict, as a trainer saves it
beside its checkpoint), loads the timeouts it learned earlier and prints those in force, and prints one
step line.

    ft_launcher --nproc-per-node=1 --ft-cfg-path=cfg.yaml ft_client.py --ft-state ft_state.json
"""

from __future__ import annotations

import argparse
import json

from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ft-state", default=None, help="a RankMonitorClient state_dict (JSON) to load")
    args = p.parse_args()
    client = RankMonitorClient()
    client.init_workload_monitoring()
    print(f"configured initial {client.hb_timeouts.initial} subsequent {client.hb_timeouts.subsequent}", flush=True)
    if args.ft_state:
        with open(args.ft_state) as f:
            client.load_state_dict(json.load(f))
        print(f"in force initial {client.hb_timeouts.initial} subsequent {client.hb_timeouts.subsequent}", flush=True)
    client.send_heartbeat()
    print("step 1 loss 1.0", flush=True)
    client.shutdown_workload_monitoring()


if __name__ == "__main__":
    main()

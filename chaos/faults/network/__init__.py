"""Network faults of a multi-node run on one host: network_partition (a node cut off from the others for
`duration_s`), network_degraded (a node's link limited to `rate_kbit` for `duration_s`: its packets queue,
the delay, and what overflows the queue is dropped, the loss).

Acts: on the machine, from outside. Such a run gives each simulated node a network namespace of its own,
  joined to the others by a veth to a bridge in a hub namespace of the run (chaos/supervise/isolation.py,
  ``node_networks``); the node supervisor (chaos/supervise/nodes.py) takes the node's bridge port down
  (partition) or puts a token bucket on both ends of its link (``tc tbf``: this kernel has no netem), at
  the fault's step, and undoes it `duration_s` later.
Undone: the link comes back up or the bucket is removed after `duration_s` (a ``link_restored`` event);
  the namespaces, links and queues end with the launch's last process, whatever the run's end.
Detected by: FT's heartbeat timeout on the ranks stuck in a collective that cannot complete (or gloo's
  own timeout if it is shorter); the launcher restarts the group, and its rendezvous completes once the
  link is back. A degradation below the limits is detected by nothing: the steps slow down, training
  completes.
"""

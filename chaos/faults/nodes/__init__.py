"""Node faults: node_killed (an agent and all its processes), node_hung (every rank of a node stopped),
node_rejoin (a replacement agent joins the rendezvous).

Acts: from outside, by the node supervisor (chaos/supervise/nodes.py; on Slurm the node's agent wrapper).
Undone: the run's reaping ends what is left of the node.
Detected by: the c10d rendezvous (a lost agent), FT's heartbeat timeouts (hung ranks).
"""

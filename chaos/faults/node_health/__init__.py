"""Node health faults: node_unhealthy (NVIDIA's node health check daemon, nvhcd, says the node is unhealthy
from a step on).

Acts: on the machine, from outside. No nvhcd runs here, so the runner plays it for the run: before each launch
  it serves NVRx's own nvhcd gRPC service (HealthCheckService.RunHealthCheck, NVRx's shipped stubs) on a Unix
  domain socket in the run folder (``nvhcd.sock``), and points ft_launcher's
  ``--ft-node-health-check-endpoint`` at it. Each answer reads the run folder's ``node-health/unhealthy``:
  absent, healthy (``fail_count`` 0); present, unhealthy (``fail_count`` 1, ``failed_checks`` the check it
  names). At its step the runner writes that file. Every request is recorded in ``node-health/answers.log``.
Undone: the service stops when the launch ends, whatever its end (the runner's ``finally``), and its socket is
  removed; the state file stays in the run folder as evidence, so a later launch of the run finds the node as
  it was left.
Detected by: nothing while the job runs (ft_launcher asks the endpoint before a rendezvous only; the rank
  monitor's periodic check is NVML's, not this one); at the next rendezvous (a restart after another fault)
  NVRx 0.7's NodeHealthCheck gets the unhealthy answer: the launcher logs "Node health check failed for node
  ...: Node ... is unhealthy." and exits 1 without starting workers.
"""

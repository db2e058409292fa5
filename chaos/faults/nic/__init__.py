"""NIC faults: nic_link_down (a port of the node's InfiniBand NIC leaves the ACTIVE state at a step).

Acts: on the machine, from outside. The launch's private mount namespace gets a /sys/class/infiniband that
  lists `nics` fake NICs (chaos_ib0, ...; chaos/supervise/isolation.py, ``infiniband``: a read-only tmpfs
  over /sys/class with the machine's other classes bind-mounted back, since sysfs takes no new folder), and
  ft_launcher's ``link_state_path_template`` points at state files in the run folder
  (``nic-link-state/{nic}/ports/1/state``), written ``4: ACTIVE`` before the first launch. At its step the
  runner writes `state` (``1: DOWN``) into NIC `nic`'s file. NVRx 0.7's NIC link state health check
  enumerates the NICs from /sys/class/infiniband whatever the template says, so the template alone cannot
  inject on a host without InfiniBand: the listing is what makes it read the files.
Undone: the mounts end with the launch's namespace (its last process), whatever the run's end; the runner
  checks that the machine's /sys/class shows no mount of the run (chaos/supervise/machine.py). The state
  files stay in the run folder as evidence; a later launch of the run finds the link as it was left.
Detected by: nothing while the job runs (NVRx checks the link state before a rendezvous only); at the next
  rendezvous (a restart after another fault) ft_launcher's NIC link state health check finds the port that
  was ACTIVE at the launcher's start no longer ACTIVE: the node is unhealthy, and the launcher exits 1
  without starting workers, logging "NIC link state health check failed for node ...".
"""

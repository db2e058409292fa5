"""A host_oom fault explains only a death the kernel's OOM killer caused (the runner's oom_kill of the run's
cgroup), and the failure's cause then names it; any other SIGKILL of that rank is unexplained."""

from __future__ import annotations

from chaos.judge.accounting import account

OOM = {"fault_id": "f0", "type": "host_oom", "rank": 1, "attempt": 0, "at_step": 7}


def _oom_run(event, killed_by_the_kernel: bool) -> list[dict]:
    kill = [event("oom_kill", 2.05, rank=-1, target=4242, target_rank=1, cgroup="/sys/fs/cgroup/memory/chaos-1-2-r", oom_kills=1)]
    return [
        event("run_start", 0.5), event("step", 1.0, iteration=6, loss=1.0),
        event("fault_injected", 2.0, rank=1, fault="host_oom", fault_id="f0", target_rank=1),
        *(kill if killed_by_the_kernel else []),
        event("worker_failed", 2.1, rank=-1, exitcode=-9, local_rank=1, line="failed (exitcode: -9) local_rank: 1"),
        event("run_start", 3.0, attempt=1), event("exit", 5.0, attempt=1, reason="completed", code=0),
    ]


def test_an_oom_kill_of_the_runs_cgroup_explains_the_sigkill_and_names_it(event) -> None:
    (failure,) = account(_oom_run(event, killed_by_the_kernel=True), [OOM], {}).failures
    assert (failure.explained_by, failure.rank, failure.signal) == ("f0", 1, "SIGKILL")
    assert failure.cause == "OOM-killed by the kernel: pid 4242 in /sys/fs/cgroup/memory/chaos-1-2-r"


def test_a_sigkill_the_kernel_did_not_count_is_no_oom_kill(event) -> None:
    accounting = account(_oom_run(event, killed_by_the_kernel=False), [OOM], {})
    (failure,) = accounting.unexplained
    assert (failure.rank, failure.cause) == (1, "killed by SIGKILL")

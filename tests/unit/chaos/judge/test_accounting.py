"""Every failure accounted for: each failed attempt matched to the fault that explains it, the ones no fault
explains and the planned faults that never came due named, from hand-built events (chaos/judge/accounting.py)."""

from __future__ import annotations

from pathlib import Path

from chaos.judge.accounting import account, record_accounting
from chaos.judge.verdicts import harness_verdicts
from chaos.schema.expect import Expect
from runlog.reader import read_events

KILL = {"fault_id": "f0", "type": "sigkill", "rank": 1, "attempt": 0, "at_step": 7}

# What ft_launcher printed when a worker died of a port another process had taken (the GPU suite's case).
CLASH_LOG = """\
[2026-12-04 01:03:49,589] [INFO] [ft_launcher2503@vm] [default] starting workers for entrypoint: python
[2026-12-04 01:03:49,763] [ERROR] [ft_launcher2503@vm] NVML Error: NVML Shared Library Not Found
Traceback (most recent call last):
  File "pynvml.py", line 3190, in _LoadNvmlLibrary
OSError: libnvidia-ml.so.1: cannot open shared object file: No such file or directory
Traceback (most recent call last):
  File "driver.py", line 12, in <module>
    dist.init_process_group("nccl")
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 58039, useIPv6: False, code: -98, name: EADDRINUSE, message: address already in use
[2026-12-04 01:03:51,813] [ERROR] [ft_launcher2503@vm] failed (exitcode: 1) local_rank: 0 (pid: 2511) of binary: python
[2026-12-04 01:03:51,813] [INFO] [ft_launcher2503@vm] [default] Worker group FAILED. 1/1 attempts left; will restart worker group
"""
CLASH_LINE = "[2026-12-04 01:03:51,813] [ERROR] [ft_launcher2503@vm] failed (exitcode: 1) local_rank: 0 (pid: 2511) of binary: python"


def _recovered_kill(event) -> list[dict]:
    return [
        event("run_start", 0.5), event("step", 1.0, iteration=7, loss=1.0),
        event("fault_injected", 2.0, rank=-1, fault="sigkill", fault_id="f0", target_rank=1),
        event("worker_failed", 2.01, rank=-1, exitcode=-9, local_rank=1, line="failed (exitcode: -9) local_rank: 1"),
        event("run_start", 3.0, attempt=1), event("step", 4.0, attempt=1, iteration=6, loss=1.0),
        event("exit", 5.0, attempt=1, reason="completed", code=0),
    ]


def test_a_killed_rank_is_explained_by_its_fault_and_named_by_its_signal(event):
    accounting = account(_recovered_kill(event), [KILL], {"": ""})
    (failure,) = accounting.failures
    assert (failure.attempt, failure.rank, failure.signal, failure.explained_by) == (0, 1, "SIGKILL", "f0")
    assert failure.cause == "killed by SIGKILL" and not failure.recovery_of
    assert accounting.unexplained == () and accounting.never_due == ()


def test_a_start_up_death_before_the_fault_is_unexplained_and_the_fault_never_came_due(event):
    """The GPU suite's bridge_async_save_killed_after: attempt 0 died of EADDRINUSE before its kill at step
    28; attempt 1 trained to the end. Not a recovery: an unexplained failure, and a fault never due."""
    events = [
        event("worker_failed", 2.0, rank=-1, exitcode=1, local_rank=0, line=CLASH_LINE),
        event("restart", 2.01, rank=-1, attempt=1, attempts_left=1),
        event("run_start", 3.0, attempt=1), event("step", 4.0, attempt=1, iteration=60, loss=1.0),
    ]
    planned = [{**KILL, "at_step": 28, "rank": 0}]
    accounting = account(events, planned, {"": CLASH_LOG})
    (failure,) = accounting.unexplained
    assert failure.attempt == 0 and failure.exit_code == 1 and failure.explained_by is None
    assert failure.cause.startswith("torch.distributed.DistNetworkError: The server socket has failed")
    assert "EADDRINUSE" in failure.cause  # the worker's exception, not the launcher's own NVML traceback
    (never,) = accounting.never_due
    assert never.describe() == "f0 sigkill: never came due (attempt 0 ran no step and ended before its trigger at step 28)"
    verdicts = {v.name: v for v in harness_verdicts(events, 60, Expect(), accounting)}
    assert not verdicts["unexplained_failures"].passed
    assert "attempt 0, rank 0, exit code 1: torch.distributed.DistNetworkError" in verdicts["unexplained_failures"].observed
    assert not verdicts["faults_found_targets"].passed and "never came due" in verdicts["faults_found_targets"].observed


def test_a_failed_recovery_is_the_faults_and_a_later_death_before_start_up_is_not(event):
    """Attempt 1 started training again and died: the recovery from f0 failed (the stack's failure). Attempt 2
    died before any rank of it started: something else (a port, a package)."""
    events = [*_recovered_kill(event)[:4],
              event("run_start", 3.0, attempt=1), event("exit", 3.5, attempt=1, reason="error", code=1, error="AssertionError: len(steps) == 1"),
              event("worker_failed", 5.0, rank=-1, attempt=2, exitcode=1, local_rank=0, line="")]
    accounting = account(events, [KILL], {"": ""})
    first, recovery, startup = accounting.failures
    assert (first.explained_by, recovery.explained_by, recovery.recovery_of) == ("f0", "f0", True)
    assert recovery.cause == "AssertionError: len(steps) == 1"
    assert startup.attempt == 2 and startup.explained_by is None


def test_a_fault_of_a_later_attempt_than_the_run_reached_never_came_due(event):
    events = [event("run_start", 0.5), event("step", 1.0, iteration=12, loss=1.0), event("exit", 2.0, reason="completed", code=0)]
    (never,) = account(events, [{**KILL, "attempt": 1}], {"": ""}).never_due
    assert never.reason == "the run ended in attempt 0, before attempt 1 that its trigger at step 7 was planned for"


def test_a_fault_that_came_due_without_a_target_is_missed_not_never_due(event):
    events = [event("fault_missed", 1.0, rank=-1, fault="sigkill", fault_id="f0", reason="no process of rank 1 within 60 s")]
    assert account(events, [KILL], {"": ""}).never_due == ()


def test_an_expected_failure_is_accounted_for_by_name_and_one_that_did_not_happen_fails(event):
    events = [event("exit", 1.0, reason="error", code=2, error="ConfigError: checkpoint.async_save needs torch_dist")]
    accounting = account(events, [], {"": ""})
    expect = Expect.model_validate({"exit_code": 1, "failures_not_injected": [{"name": "config_refused", "cause": "torch_dist"}]})
    verdicts = {v.name: v for v in harness_verdicts(events, 60, expect, accounting)}
    assert verdicts["unexplained_failures"].passed
    other = Expect.model_validate({"exit_code": 1, "failures_not_injected": [{"name": "oom", "cause": "out of memory"}]})
    wrong = {v.name: v for v in harness_verdicts(events, 60, other, accounting)}["unexplained_failures"]
    assert not wrong.passed and wrong.observed.endswith("expected but not seen: oom")


def test_the_accounting_is_written_into_the_run_log_and_never_read_back_as_a_failure(tmp_path: Path, event):
    events = [event("worker_failed", 2.0, rank=-1, exitcode=1, local_rank=0, line=CLASH_LINE, wall=100.0)]
    accounting = account(events, [KILL], {"": CLASH_LOG})
    written = record_accounting(tmp_path, accounting, events)
    assert [e["event"] for e in written] == ["unexplained_failure", "fault_never_due"]
    on_disk = read_events(tmp_path)
    assert [e["event"] for e in on_disk] == ["unexplained_failure", "fault_never_due"]
    assert on_disk[0]["attempt"] == 0 and on_disk[0]["mono"] == 2.0 and "EADDRINUSE" in on_disk[0]["cause"]
    assert account(events + on_disk, [KILL], {"": CLASH_LOG}) == accounting  # judging again gives the same
    record_accounting(tmp_path, account([], [], {}), [])  # a clean judging leaves no stale findings
    assert read_events(tmp_path) == []


def test_a_restart_no_other_sign_announced_is_its_attempts_failure(event):
    """ft_launcher restarted the group and nothing else of attempt 0 said why: still a failure to account for."""
    events = [event("run_start", 0.5), event("restart", 2.0, rank=-1, attempt=1, attempts_left=2, line="Worker group FAILED")]
    (failure,) = account(events, [], {"": ""}).unexplained
    assert (failure.attempt, failure.how, failure.cause) == (0, "restart", "the launcher restarted the worker group: Worker group FAILED")


def test_without_an_exception_the_cause_is_the_workers_last_line(event):
    """A script the worker could not open (exit 2) printed no traceback: its own last line says why."""
    line = "E1204 01:56:49.383000 9488 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 2) local_rank: 0"
    log = ("I1204 01:56:40.100000 9488 torch/distributed/run.py:800] starting\n"
           "/opt/torch/.venv/bin/python3: can't open file '/run/drivers/megatron_lm.py': [Errno 2] No such file or directory\n"
           f"{line}\n")
    events = [event("worker_failed", 2.0, rank=-1, exitcode=2, local_rank=0, line=line)]
    (failure,) = account(events, [], {"": log}).unexplained
    assert failure.cause.endswith("can't open file '/run/drivers/megatron_lm.py': [Errno 2] No such file or directory")


def test_the_trainers_own_rerun_error_injection_explains_its_exit(event):
    """rerun_state_machine.error_injection_rate: the trainer injects the error itself; its rerun event says
    so, and the exit 17 it leads to is that injection's, not unexplained."""
    events = [event("run_start", 0.5), event("rerun", 1.0, state="rerunning_in_place", check="injected", iteration=3),
              event("exit", 2.0, reason="rerun", code=17, error="transient error")]
    (failure,) = account(events, [], {"": ""}).failures
    assert failure.explained_by == "rerun_error_injection"


# What ft_launcher printed when attempt 1's rank 0 died of the port attempt 0's DataLoader workers still held
# (external_loader_hung; a launcher's error record, with no traceback of its own, came just before).
HELD_LINE = "[2026-12-06 04:04:16,062] [ERROR] [ft_launcher18800@vm] failed (exitcode: 1) local_rank: 0 (pid: 18950) of binary: sh"
HELD_LOG = f"""\
[2026-12-06 04:04:13,512] [ERROR] [ft_launcher18800@vm] gpu_ib_map is empty. Disable NIC health check for local_rank: 0
Traceback (most recent call last):
  File "/repo/tests/functional/standalone/loader_train.py", line 89, in <module>
    main()
  File "/venv/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 199, in _create_c10d_store
    return TCPStore(
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 31145, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use
[W1206 04:04:13.079718467 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3
{HELD_LINE}
"""


def _leftover(pid: int, ports: list[int]) -> dict:
    return {"pid": pid, "name": "pt_data_worker", "attempt": 0, "rank": 0, "ports": ports, "files": [], "gpu_mib": None}


def _killed_with_leftovers(event, ports: list[int], gone: bool = True) -> list[dict]:
    """f0 SIGKILLs rank 0 of attempt 0; its two DataLoader workers hold `ports` when attempt 1 starts, whose
    rank 0 dies at start-up of EADDRINUSE on 31145; the workers go 3.5 s after the kill."""
    events = [
        event("run_start", 0.5), event("step", 1.0, iteration=8, loss=1.0),
        event("fault_injected", 2.0, rank=-1, fault="sigkill", fault_id="f0", target_rank=0),
        event("worker_failed", 2.1, rank=-1, exitcode=-9, local_rank=0, line="failed (exitcode: -9) local_rank: 0"),
        event("restart", 2.1, rank=-1, attempt=1, attempts_left=2),
        event("leftovers_at_start", 2.2, rank=-1, attempt=1, processes=[_leftover(11, ports), _leftover(12, ports)]),
        event("worker_failed", 4.0, rank=-1, attempt=1, exitcode=1, local_rank=0, line=HELD_LINE),
        event("restart", 4.0, rank=-1, attempt=2, attempts_left=1),
        event("step", 9.0, attempt=2, iteration=9, loss=1.0, observed=True),
    ]
    if gone:
        events += [event("leftover_gone", 5.0, rank=-1, attempt=1, target=11), event("leftover_gone", 5.6, rank=-1, attempt=1, target=12)]
    return events


def test_a_start_up_death_on_a_port_an_earlier_attempts_leftovers_held_is_a_failed_recovery_naming_them(event):
    accounting = account(_killed_with_leftovers(event, [31145, 37797]), [{**KILL, "rank": 0, "at_step": 8}], {"": HELD_LOG})
    first, held = accounting.failures
    assert (first.explained_by, first.recovery_of) == ("f0", False)
    assert (held.attempt, held.rank, held.explained_by, held.recovery_of) == (1, 0, "f0", True)
    assert held.cause.startswith("port 31145 held by 2 pt_data_worker processes of attempt 0 (left over 3.5 s after the kill): "
                                 "torch.distributed.DistNetworkError: The server socket has failed to listen")
    assert accounting.unexplained == ()


def test_leftovers_on_another_port_or_none_at_all_leave_the_clash_unexplained(event):
    other = account(_killed_with_leftovers(event, [29500]), [KILL], {"": HELD_LOG})
    assert [f.attempt for f in other.unexplained] == [1] and "EADDRINUSE" in other.unexplained[0].cause
    without = [e for e in _killed_with_leftovers(event, [31145]) if e["event"] != "leftovers_at_start"]
    assert [f.attempt for f in account(without, [KILL], {"": HELD_LOG}).unexplained] == [1]


def test_a_leftover_the_runner_saw_outlive_its_watch_is_said_so(event):
    accounting = account(_killed_with_leftovers(event, [31145], gone=False), [KILL], {"": HELD_LOG})
    assert "(still there when the runner stopped watching)" in accounting.failures[1].cause


def test_a_held_checkpoint_file_or_gpu_memory_explains_a_failure_that_names_it(event):
    """The other resources a leftover holds: a file its cause names, GPU memory when it died of a CUDA OOM."""
    ckpt = "/runs/r/checkpoints/iter_5/rank0.pt"
    holder = {**_leftover(11, []), "name": "python", "files": [ckpt], "gpu_mib": 30000}
    base = [e for e in _killed_with_leftovers(event, []) if e["event"] != "leftovers_at_start" and (e["event"], e["attempt"]) != ("worker_failed", 1)]
    for error, resource in [(f"PermissionError: [Errno 13] {ckpt} is locked", f"file {ckpt}"),
                            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "GPU memory")]:
        events = [*base, event("leftovers_at_start", 2.2, rank=-1, attempt=1, processes=[holder]),
                  event("run_start", 3.0, attempt=1, rank=1), event("exit", 3.5, attempt=1, reason="error", code=1, error=error)]
        (failure,) = [f for f in account(events, [KILL], {"": ""}).failures if f.attempt == 1]
        assert failure.recovery_of and failure.cause == f"{resource} held by 1 python process of attempt 0 (left over 2.9 s after the kill): {error}"


NIC_LOG = """\
2026-12-06 07:03:51,783 [ERROR] [vm] health_check.py:843 NIC device chaos_ib0: Port state changed from ACTIVE to DOWN. Health check FAILED.
2026-12-06 07:03:51,786 [ERROR] [vm] ft_rendezvous_barrier.py:2629 NIC link state health check failed for node localhost_1_0: Node localhost_1_0 has unhealthy NIC link(s).
"""


def test_a_restart_a_health_check_refused_is_the_failed_recovery_of_what_that_check_looks_at(event):
    """ft_nic_link_down_w1: the link goes down (f0), the rank is killed (f1), the launcher restarts and its NIC
    check refuses the new attempt: the link down broke the restart, not the kill, the newest fault."""
    events = [
        event("run_start", 0.5), event("step", 1.0, iteration=4, loss=1.0),
        event("fault_injected", 1.1, rank=-1, fault="nic_link_down", fault_id="f0"),
        event("fault_injected", 1.2, fault="rank_killed", fault_id="f1", target_rank=0),
        event("worker_failed", 1.3, rank=-1, exitcode=-9, local_rank=0, line="failed (exitcode: -9) local_rank: 0"),
        event("restart", 1.31, rank=-1, attempt=1, attempts_left=2),
        event("launcher_exit", 8.0, rank=-1, attempt=1, code=1),
    ]
    planned = [{"fault_id": "f0", "type": "nic_link_down", "rank": None, "attempt": 0, "at_step": 4},
               {**KILL, "fault_id": "f1", "type": "rank_killed", "rank": 0, "at_step": 6}]
    kill, refused = account(events, planned, {"": NIC_LOG}).failures
    assert (kill.explained_by, kill.recovery_of) == ("f1", False)
    assert (refused.attempt, refused.explained_by, refused.recovery_of) == (1, "f0", True)
    assert refused.cause == ("the launcher exited 1: NIC link state health check failed for node localhost_1_0: "
                             "Node localhost_1_0 has unhealthy NIC link(s).")
    other = NIC_LOG.replace("NIC link state health check", "Storage path health check")
    assert account(events, planned, {"": other}).failures[1].explained_by == "f1"  # no storage fault: the newest
    node = [{**p, "type": "node_unhealthy"} if p["fault_id"] == "f0" else p for p in planned]
    unhealthy = [{**e, "fault": "node_unhealthy"} if e.get("fault_id") == "f0" else e for e in events]
    node_log = ("2026-12-06 08:27:20,987 [ERROR] [vm] ft_rendezvous_barrier.py:2629 Node health check failed for node "
                "localhost_1_0: Node localhost_1_0 is unhealthy.\n")  # ft_node_unhealthy_w1's refused restart
    assert account(unhealthy, node, {"": node_log}).failures[1].explained_by == "f0"

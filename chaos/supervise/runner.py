"""Run one scenario: folder, plan, launch, watch, judge, report.

    scenario ─▶ run folder + plan.json + ft.yaml ─▶ launcher (own session, deadline) ─▶ events/*.jsonl
             ─▶ timeline + metrics ─▶ verdicts (+ cached fault-free baseline) ─▶ journal.json + timeline.png
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from chaos.adapters import flight_recorder
from chaos.errors import BadInput, NeverRan
from chaos.faults.nic.planned import TEMPLATE, launch_nics
from chaos.faults.nic.schema import NicLinkDown as NicLinkDownSpec
from chaos.faults.node_health.planned import SOCKET, node_health_endpoint
from chaos.faults.node_health.schema import NodeUnhealthy as NodeUnhealthySpec
from chaos.faults.plan import PlannedFault, arming, write_plan
from chaos.judge.baseline import BaselineFailed, cache_dir, cached_baseline, ensure_baseline
from chaos.judge.run import RunOutcome, installed, judge_folder, scenario_of
from chaos.judge.verdicts import left_processes
from chaos.schema.command import ft_cfg, ft_section, rank_argv
from chaos.schema.ft_options import RUN_DIR_PATHS
from chaos.schema.scenario import Scenario, plan_faults
from chaos.supervise.attempts import AttemptTracker
from chaos.supervise.foreign import AdapterSteps
from chaos.supervise.isolation import NETWORK_VAR, Isolation, node_address
from chaos.supervise.launch import Launch, LaunchResult, LaunchSpec
from chaos.supervise.machine import RunMachine, lacks
from chaos.supervise.node_health import NodeHealthService
from chaos.supervise.nodes import gpu_blocks, lacks_networks, node_networks, run_nodes, visible_gpus
from chaos.supervise.ports import reserve_ports, sweep_claims
from chaos.supervise.progress import ProgressView
from chaos.supervise.scratch import make_tmp_dir, sweep_tmp_dirs
from chaos.supervise.signals import EventSteps, ExternalFaults, LogSteps
from chaos.supervise.storage import RunStorage
from chaos.supervise.watchdog import Watchdog
from runlog import names
from runlog.env import STORE_PORT_VAR
from runlog.layout import RunFolder
from runlog.log import EventLog
from runlog.reader import read_events
from runlog.records import Leftover
from trainer import nvrx_compat
from trainer.config import cuda_available, wants_cuda

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RunError(BadInput):
    """A run that cannot start: on this machine (its GPUs), or in the folder asked for."""


def unrunnable(scenario: Scenario, device: str | None) -> str | None:
    """Why this machine cannot run `scenario` on `device` ('cpu', 'cuda'; None: where its config puts it),
    or None. The CLI refuses such a run before launching anything; the pytest plugin skips it."""
    if scenario.requires == "slurm":
        return f"{scenario.name} runs as a Slurm job (requires: slurm): nox -s slurm, or python -m chaos run --slurm {scenario.name}"
    kinds = {fault.type for fault in scenario.faults}
    lacking = lacks(kinds) or lacks_networks(kinds)
    if lacking:
        return f"{scenario.name}: {lacking}"
    lacking = nvrx_compat.launcher_lacks(scenario.ft.model_dump()) if scenario.launcher == "ft_launcher" else []
    if lacking:
        return f"{scenario.name} sets ft.{', ft.'.join(lacking)}, which NVRx {nvrx_compat.VERSION}'s ft_launcher lacks (NVRx 0.7 has it)"
    missing = [name for name in scenario.needs if not installed(name)]
    if missing:
        how = "tools/megatron-gpu-setup.sh" + (", tools/te-gpu-stage.sh" if "transformer-engine" in missing else "")
        return f"{scenario.name} needs {', '.join(missing)}, not installed here ({how} on a GPU machine)"
    on_cuda = device == "cuda" if device is not None else _on_cuda_by_itself(scenario)
    if scenario.requires == "gpu" and not on_cuda:
        return f"{scenario.name} needs CUDA GPUs (requires: gpu): run it with nox -s gpu on a GPU machine"
    if scenario.requires == "cpu" and on_cuda:
        return f"{scenario.name} proves a CPU/gloo behaviour (requires: cpu)"
    if on_cuda:
        import torch

        if torch.cuda.device_count() < scenario.world_size:
            return f"{scenario.name} needs {scenario.world_size} GPUs, this machine has {torch.cuda.device_count()}"
    return None


def _on_cuda_by_itself(scenario: Scenario) -> bool:
    """Where a run goes when nobody picks a device: our trainer's config says; a `command` picks its own
    device, so it runs on CUDA where the machine has it."""
    if scenario.command is None:
        return wants_cuda(scenario.config.dist)
    return cuda_available()


def launcher_command(scenario: Scenario, run_dir: Path, port: int, overrides: list[str], host: str = "127.0.0.1") -> list[str]:
    """The launcher's command line: c10d rendezvous on a reserved port of `host` (node 0's address), then the trainer."""
    common = [
        "--rdzv-backend=c10d", f"--rdzv-endpoint={host}:{port}", f"--rdzv-id={run_dir.name}",
        f"--nnodes={scenario.nodes}", f"--nproc-per-node={scenario.node_size}", f"--max-restarts={scenario.max_restarts}",
        "--monitor-interval=0.1",
    ]
    trainer = ["-m", "trainer", "--recipe", scenario.recipe, *overrides]
    if scenario.command is not None:
        shim = STORE_PORT_SHIM if scenario.launcher == "ft_launcher" else []
        trainer = ["--no-python", *shim, *external_command(rank_argv(scenario.command), run_dir)]
    if scenario.launcher == "torchrun" and scenario.config.inprocess_restart.enabled:
        # c10d hands workers an ephemeral MASTER_PORT; static rendezvous hands them `port`, so that NVRx's
        # in-process stores on MASTER_PORT+1 and +2 land on the ports reserved with it.
        static = ["--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}", "--node-rank=0"]
        return [sys.executable, "-m", "torch.distributed.run", *static, *common[3:], *trainer]
    if scenario.launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *common, *trainer]
    ft_yaml = RunFolder(run_dir).ft_config
    options = ft_options(scenario, run_dir)
    ft_yaml.write_text(yaml.safe_dump(nvrx_compat.ft_config_section(options)))
    return [
        sys.executable, *nvrx_compat.LAUNCHER_ARGV, *common, f"--term-timeout={scenario.ft.term_timeout:g}",
        f"--ft-cfg-path={ft_yaml}", *nvrx_compat.launcher_cli_options(options), *trainer,
    ]


STORE_PORT_SHIM = ["sh", "-c", f'export MASTER_PORT="${{{STORE_PORT_VAR}:-$MASTER_PORT}}"; exec "$@"', "sh"]
"""A command's workers under ft_launcher take the reserved store port as MASTER_PORT, as our trainer does
(trainer/distributed.py): ft_launcher's own pick is a port it bound, released and handed on, free for any
process to take first (EADDRINUSE at start-up, a restart burnt; issue 30)."""


def ft_options(scenario: Scenario, run_dir: Path) -> dict[str, Any]:
    """ft_launcher's options: the `fault_tolerance` section of the command's own --ft-cfg-path when it names
    one (then `ft:` sets only how the launcher runs here, MACHINE_OPTIONS; chaos/schema/command.py), else the
    scenario's `ft:`. NVRx lets timeouts a rank calculated and loaded (its ft_state) override either."""
    own = ft_cfg(scenario.command) if scenario.command is not None else None
    if own is None:
        options = scenario.ft.model_dump(exclude={"term_timeout"})
        if any(isinstance(f, NicLinkDownSpec) for f in scenario.faults):
            options["link_state_path_template"] = TEMPLATE  # the run's link state files (chaos/faults/nic)
        if any(isinstance(f, NodeUnhealthySpec) for f in scenario.faults):
            options["node_health_check_endpoint"] = str(run_dir / SOCKET)  # the run's service (chaos/faults/node_health)
        return {k: _in_run(v, run_dir) if k in RUN_DIR_PATHS and v else v for k, v in options.items()}
    section = ft_section(own.replace("{run_dir}", str(run_dir)))
    reclaim = scenario.ft.gpu_memory_reclaim_timeout
    return section if reclaim is None else {**section, "gpu_memory_reclaim_timeout": reclaim}


def _in_run(path: str, run_dir: Path) -> str:
    """An ``ft:`` path option with `{run_dir}` the run folder and `{project}` this project's folder."""
    return path.replace("{run_dir}", str(run_dir)).replace("{project}", str(PROJECT_ROOT))


def external_command(command: list[str], run_dir: Path) -> list[str]:
    """A scenario's own training command, run as written, except: a leading `python` is this interpreter,
    and `{run_dir}` in an argument is the run folder (for the command's own checkpoints and logs)."""
    argv = [arg.replace("{run_dir}", str(run_dir)) for arg in command]
    return [sys.executable, *argv[1:]] if argv[0] == "python" else argv


def launcher_env(scenario: Scenario, ports: list[int]) -> dict[str, str]:
    """torchrun logs its restart decision ("Worker group FAILED. k/N attempts left") only at INFO; the
    runner needs that line to count the restarts of a command that writes no events. Under ft_launcher
    rank 0's store goes on the second reserved port (runlog/env.py, STORE_PORT_VAR)."""
    if scenario.launcher == "torchrun":
        return {"LOGLEVEL": "INFO"}
    return {STORE_PORT_VAR: str(ports[1])}


def child_env(tmp_dir: Path) -> dict[str, str]:
    """The environment of a run's processes; TMPDIR is the run's own temporary folder (chaos/supervise/scratch.py)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore::FutureWarning", TMPDIR=str(tmp_dir))
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast can take a shared host's GPUs down
    return env


def on_device(scenario: Scenario, device: str | None) -> Scenario:
    """The scenario with its trainer on `device` ('cpu' or 'cuda'; None keeps the recipe's choice). A
    `command` chooses its own device: it is left as it is."""
    if device is None or scenario.command is not None:
        return scenario
    return scenario.replace(trainer={**scenario.trainer, "dist.device": device})


def new_run_dir(out_dir: Path, name: str) -> Path:
    run_dir = out_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    try:
        run_dir.mkdir(parents=True)
    except OSError as e:
        raise RunError(f"{out_dir}: cannot make a run folder there ({e.strerror})") from None
    return run_dir


def execute(scenario: Scenario, run_dir: Path, seed: int, progress: Callable[[str], None] | None) -> LaunchResult:
    """Launch the scenario's run in `run_dir` and wait for it (no judging)."""
    run_dir = run_dir.resolve()  # the launcher runs in the run folder, not in our cwd
    folder = RunFolder(run_dir)
    overrides = scenario.trainer_overrides(run_dir)
    plan = plan_faults(scenario, seed)
    if plan:
        write_plan(folder.plan, plan)
        overrides.extend(arming(folder.plan))
    attempts = AttemptTracker()
    events = EventLog(run_dir, "launcher", rank=-1, attempt=attempts.launcher)
    view = ProgressView(run_dir, progress) if progress else None
    steps = observed_steps(scenario, run_dir)
    external = ExternalFaults(plan, events, attempts, run_dir.name, steps, scenario.world_size, run_dir=run_dir)

    machine = RunMachine.start(plan, run_dir, events)

    def tick() -> None:
        external.tick()
        machine.tick()
        if view:
            view.tick()

    sweep_tmp_dirs()  # what runners killed before their cleanup left, their watchdogs too
    sweep_claims()
    tmp_dir = make_tmp_dir()
    watchdog = Watchdog.start(run_dir.name, tmp_dir)  # the run's processes die with this process
    env = {**child_env(tmp_dir), **machine.env, **(flight_recorder.arming_env(run_dir) if scenario.flight_recorder else {})}
    launch = partial(_launch, scenario, run_dir, overrides, plan, events, attempts, tick, steps)
    try:
        result = launch(env, scenario.deadline_s, {})
        budget = scenario.deadline_s - result.counted_s
        retries, relaunch = scenario.job_retries, scenario.relaunch
        while not (result.timed_out or result.interrupted):
            if result.exit_code and retries:  # a failed job is launched again (NeMo-Run's executor.retries)
                retries, extra = retries - 1, {}
            elif relaunch:  # a requeued job (after a preemption)
                relaunch, extra = False, scenario.relaunch_env
            else:
                break
            attempts.relaunched()  # the next launch numbers its attempts on from the last one's
            result = launch(env, budget, extra)
            budget -= result.counted_s
        return result
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        watchdog.close()
        external.close()
        left = machine.close()
        if left:
            events.write(Leftover([], isolation=left))
        if isinstance(steps, LogSteps | AdapterSteps):
            steps.close()
        events.close()


Steps = EventSteps | LogSteps | AdapterSteps


def observed_steps(scenario: Scenario, run_dir: Path) -> Steps:
    """Where the run's steps are seen: the trainer's events, a command's `step_pattern` lines, or what the
    scenario's `adapter` reads in the command's output (it writes every record it reads as an event)."""
    if scenario.adapter is not None:
        return AdapterSteps(run_dir, scenario.adapter)
    if scenario.step_pattern is not None:
        return LogSteps(run_dir, scenario.step_pattern)
    return EventSteps(run_dir)


def _launch(
    scenario: Scenario, run_dir: Path, overrides: list[str], plan: list[PlannedFault], events: EventLog,
    attempts: AttemptTracker, tick: Callable[[], None], steps: Steps, env: dict[str, str],
    deadline_s: float, env_overrides: dict[str, str],
) -> LaunchResult:
    """One launch of the job: its agents (one per node) in one c10d rendezvous on reserved loopback ports."""
    claim = reserve_ports(3)
    endpoint = node_health_endpoint(plan, run_dir)
    health = NodeHealthService(run_dir, endpoint) if endpoint is not None else None
    try:
        on_gpus = scenario.nodes > 1 and wants_cuda(scenario.config.dist)
        storage = RunStorage.of(plan, run_dir)
        nics = launch_nics(plan, run_dir)
        networks = node_networks(plan, scenario.nodes + scenario.spares)
        host = node_address(0) if networks else "127.0.0.1"
        spec = LaunchSpec(
            command=storage.command(launcher_command(scenario, run_dir, claim.ports[0], overrides, host)),
            env={**env, **launcher_env(scenario, claim.ports), **env_overrides},
            run_dir=run_dir, deadline_s=deadline_s, run_id=run_dir.name, cwd=run_dir, nodes=scenario.nodes,
            gpu_blocks=tuple(gpu_blocks(visible_gpus(), scenario.node_size)) if on_gpus else (),
            isolation=Isolation(tmpfs=storage.tmpfs, network=own_network(), node_networks=networks, infiniband=nics),
        )
        launch = Launch(spec, events, attempts, on_line=steps.line if isinstance(steps, LogSteps | AdapterSteps) else None)
        if scenario.nodes > 1:
            return run_nodes(launch, plan, scenario.spares, scenario.world_size, tick)
        launch.on_tick = tick
        return launch.wait()
    finally:
        if health is not None:
            health.stop()
        claim.release()


def own_network() -> bool:
    """Whether runs get a network of their own (CHAOS_NETWORK: ``run``, the default, or ``machine``)."""
    wanted = os.environ.get(NETWORK_VAR, "run")
    if wanted not in ("run", "machine"):
        raise RunError(f"{NETWORK_VAR}={wanted}: expected run or machine")
    return wanted == "run"


def _run_baseline(scenario: Scenario, folder: Path) -> str | None:
    """Run the fault-free baseline in `folder`; None when it completed, else why not."""
    result = execute(scenario, folder, scenario.seed, progress=None)
    if result.timed_out:
        return f"killed at its deadline of {scenario.deadline_s:g} s"
    if result.exit_code != 0:
        return f"launcher exit {result.exit_code}"
    if not result.leftovers:
        return None
    return "processes left behind: " + "; ".join(map(str, left_processes(read_events(folder))))


def run_scenario(
    scenario: Scenario,
    out_dir: Path,
    *,
    scenario_file: Path | None = None,
    seed: int | None = None,
    keep: bool = False,
    progress: Callable[[str], None] | None = print,
    device: str | None = None,
) -> RunOutcome:
    """Run, judge and report one scenario; the journal and picture stay in the returned run folder.
    RunError, before anything is launched, when this machine cannot run it on `device` (as ``unrunnable``
    takes it: the device a caller put the trainer on, which a `command` scenario's script does not show) or
    `out_dir` takes no folder."""
    reason = unrunnable(scenario, device)
    if reason is not None:
        raise RunError(reason)
    seed = scenario.seed if seed is None else seed
    scenario = scenario.replace(seed=seed)  # the journal records the seed the run used
    run_dir = new_run_dir(out_dir, scenario.name)
    RunFolder(run_dir).scenario.write_text(yaml.safe_dump({**scenario.model_dump(mode="json"), "seed": seed}, sort_keys=False))
    if progress:
        progress(f"chaos: {scenario.name}: {scenario.world_size} ranks under {scenario.launcher}; run folder {run_dir}")
    execute(scenario, run_dir, seed, progress)
    outcome = judge_run_dir(run_dir, scenario, scenario_file=scenario_file, progress=progress)
    if not keep:
        shutil.rmtree(RunFolder(run_dir).checkpoints, ignore_errors=True)
    return outcome


def judge_run_dir(
    run_dir: Path,
    scenario: Scenario | None = None,
    *,
    scenario_file: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Judge a finished run folder from its files, and for a scenario that expects `baseline:` from its
    fault-free baseline too: trained first when this config's is not cached (chaos/judge/baseline.py);
    (re)writes journal.json and timeline.png. A baseline that fails is the baseline verdict's failure, with
    its reason and log; the run's other verdicts are judged all the same. NeverRan when the folder's job
    never started: nothing to judge, no baseline trained."""
    scenario = scenario_of(run_dir) if scenario is None else scenario
    check_ran(run_dir)
    baseline: Path | str | None = None
    if scenario.expect.baseline is not None:
        if progress:
            cached = cached_baseline(scenario)
            progress(f"chaos: comparing with the cached fault-free baseline {cached}" if cached else
                     f"chaos: training the fault-free baseline of this config first (once; cached in {cache_dir()})")
        try:
            baseline = ensure_baseline(scenario, _run_baseline)
        except BaselineFailed as e:
            baseline = str(e)
    return judge_folder(run_dir, scenario, baseline, scenario_file=scenario_file)


def check_ran(run_dir: Path) -> None:
    """NeverRan when no launch of the folder's job is in its events: a Slurm job written and never
    submitted, or still queued (its batch script named in the line)."""
    events = read_events(run_dir)
    if any(e["event"] == names.LAUNCH for e in events):
        return
    scripts = sorted(run_dir.glob("*.sbatch"))
    if any(e["event"] == names.SUBMIT for e in events):
        how = "; it was submitted: Slurm's output (slurm-*.out, sbatch.log) in the folder says why it did not start"
    elif scripts:
        how = f"; submit it with sbatch {scripts[0]} (a job still queued has not started yet)"
    else:
        how = ""
    raise NeverRan(f"{run_dir}: the job never ran: no launch in its events, nothing to judge{how}")

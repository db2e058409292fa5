"""The attribution scenario's launcher command: what ft_launcher is told, in its YAML and on its command line.

Under NVRx 0.7 NVRx's own argument parser and attribution config read that command (the run itself is
scenarios/ft_attribution_stop_no_llm_w1.yaml, docs/records/2026-12-06-attribution-stop.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chaos.schema.loader import load_scenario
from chaos.supervise.runner import PROJECT_ROOT, launcher_command
from trainer import nvrx_compat

SCENARIO = PROJECT_ROOT / "scenarios" / "ft_attribution_stop_no_llm_w1.yaml"
KEY = PROJECT_ROOT / "scenarios" / "files" / "unreachable-llm.key"


def _command(run_dir: Path) -> list[str]:
    return launcher_command(load_scenario(SCENARIO), run_dir, 29500, [])


def test_the_service_options_go_where_the_launcher_reads_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(nvrx_compat, "_MAJOR_MINOR", (0, 7))
    argv = _command(tmp_path)
    section = yaml.safe_load((tmp_path / "ft.yaml").read_text())["fault_tolerance"]
    assert (section["attribution_endpoint"], section["attribution_stop_action"]) == ("localhost", "no-restart")
    assert not {"attribution_analysis_backend", "attribution_llm_api_key_file", "attribution_llm_base_url", "per_cycle_applog_prefix"} & section.keys()
    assert {
        "--ft-attribution-analysis-backend=lib", f"--ft-attribution-llm-api-key-file={KEY}",
        "--ft-attribution-llm-base-url=http://127.0.0.1:9/v1", f"--ft-per-cycle-applog-prefix={tmp_path}/applog/worker.log",
        "--ft-no-restart-exit-code=75",
    } <= set(argv)
    assert KEY.is_file(), "the launcher-managed service refuses to start without a readable key file"


@pytest.mark.skipif(nvrx_compat._MAJOR_MINOR >= (0, 7), reason="NVRx 0.7's launcher is installed")
def test_under_nvrx_0_4_the_scenario_is_refused_naming_the_attribution_options() -> None:
    from chaos.supervise.runner import unrunnable

    reason = unrunnable(load_scenario(SCENARIO), "cpu")
    assert reason is not None
    assert "ft.attribution_endpoint, ft.attribution_stop_action, ft.attribution_analysis_backend" in reason
    assert reason.endswith(f"which NVRx {nvrx_compat.VERSION}'s ft_launcher lacks (NVRx 0.7 has it)")


@pytest.mark.skipif(nvrx_compat._MAJOR_MINOR < (0, 7), reason=f"NVRx {nvrx_compat.VERSION}'s launcher has no attribution service")
def test_nvrx_reads_the_command_as_a_launcher_managed_service_that_enforces_stop(tmp_path: Path) -> None:
    from nvidia_resiliency_ext.fault_tolerance.attribution_manager import AttributionConfig
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig
    from nvidia_resiliency_ext.fault_tolerance.launcher import get_args_parser

    argv = _command(tmp_path)
    args = get_args_parser().parse_args(argv[argv.index("--rdzv-backend=c10d"):])
    ft_cfg = FaultToleranceConfig.from_args(args)
    cfg = AttributionConfig.from_args(args, args.ft_per_cycle_applog_prefix, ft_cfg)
    assert (cfg.is_managed, cfg.enforce_stop, cfg.analysis_backend) == (True, True, "lib")
    assert (cfg.llm_api_key_file, cfg.llm_base_url) == (str(KEY), "http://127.0.0.1:9/v1")

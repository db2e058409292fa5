"""The trainer's Flight Recorder dump on gloo (trainer/flight_recorder.py), read back by torch's analyser
(chaos/adapters/flight_recorder.py): a real process group of one in a child process, so torch reads the
armed environment at its start as a launched rank does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chaos.adapters import flight_recorder

ONE_RANK = """
import os, torch, torch.distributed as dist
from trainer import flight_recorder
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo")
t = torch.ones(2)
for _ in range(3):
    dist.all_reduce(t)
print(flight_recorder.dump_on_error(0), flight_recorder.dump_on_error(0))
dist.destroy_process_group()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_armed_rank_dumps_once_and_torchs_analyser_reads_its_gloo_dump(tmp_path: Path):
    env = {**os.environ, **flight_recorder.arming_env(tmp_path), "PORT": str(_free_port()), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", ONE_RANK], env=env, capture_output=True, text=True, timeout=120, check=True)
    written = flight_recorder.dump_folder(tmp_path) / "rank_0"
    assert out.stdout.split()[-2:] == [str(written), "None"]  # the first dump is kept
    analysis = flight_recorder.analyse(tmp_path)
    assert analysis is not None and analysis.error is None and analysis.missing == ()


def test_an_unarmed_rank_dumps_nothing_and_a_run_without_dumps_has_no_analysis(tmp_path: Path, monkeypatch):
    from trainer import flight_recorder as trainer_side

    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    assert not trainer_side.armed() and trainer_side.dump_on_error(0) is None
    assert flight_recorder.analyse(tmp_path) is None


def test_dumps_the_analyser_cannot_read_are_reported_in_one_line(tmp_path: Path):
    (flight_recorder.dump_folder(tmp_path)).mkdir()
    (flight_recorder.dump_folder(tmp_path) / "rank_0").write_bytes(b"not a pickle")
    analysis = flight_recorder.analyse(tmp_path)
    assert analysis is not None and analysis.missing == ()
    assert analysis.error is not None and analysis.error.startswith("torch's Flight Recorder analyser failed on")

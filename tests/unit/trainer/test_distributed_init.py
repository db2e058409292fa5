"""Process-group setup from a launcher's environment (a world of one, real gloo)."""

import socket

import pytest
import torch.distributed as dist

from runlog.env import STORE_PORT_VAR
from trainer.config import DistConfig
from trainer.distributed import init_distributed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launched_world_of_one(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    yield monkeypatch
    if dist.is_initialized():
        dist.destroy_process_group()


def test_rank_0_hosts_its_store_on_the_port_the_runner_reserved(launched_world_of_one):
    reserved, launchers = free_port(), free_port()
    launched_world_of_one.setenv("MASTER_PORT", str(launchers))
    launched_world_of_one.setenv(STORE_PORT_VAR, str(reserved))
    env = init_distributed(DistConfig(device="cpu"))
    assert env.backend == "gloo" and env.world_size == 1
    with socket.socket() as s:  # the reserved port is taken by the store now; the launcher's was never bound
        assert s.connect_ex(("127.0.0.1", reserved)) == 0
        s.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", launchers))


def test_without_a_reserved_port_the_launchers_master_port_is_used(launched_world_of_one):
    port = free_port()
    launched_world_of_one.setenv("MASTER_PORT", str(port))
    launched_world_of_one.delenv(STORE_PORT_VAR, raising=False)
    init_distributed(DistConfig(device="cpu"))
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) == 0

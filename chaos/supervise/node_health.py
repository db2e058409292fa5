"""The run's node health service: NVRx's own nvhcd gRPC service (HealthCheckService.RunHealthCheck, from the
stubs NVRx ships) on a Unix domain socket, answering from the run folder's node health state
(chaos/faults/node_health/planned.py), as NVIDIA's node health check daemon would for the node."""

from __future__ import annotations

import json
import time
from concurrent import futures
from pathlib import Path
from typing import Any

from chaos.errors import BadInput
from chaos.faults.node_health.planned import STATE, failed_check
from trainer import nvrx_compat

MAX_SOCKET_PATH = 107
"""The longest path a Unix domain socket binds (sun_path's 108 bytes, one for the NUL)."""


def unavailable() -> str | None:
    """Why this machine cannot play the node health service for ft_launcher, or None."""
    if nvrx_compat.launcher_lacks({"node_health_check_endpoint": "x"}):
        return (f"node_unhealthy points ft_launcher's --ft-node-health-check-endpoint at the run's node health "
                f"service, which NVRx {nvrx_compat.VERSION}'s ft_launcher lacks (NVRx 0.7 has it)")
    try:
        nvrx_compat.node_health_stubs()
    except ImportError as e:
        return f"node_unhealthy serves NVRx's nvhcd gRPC service: {e} (pip install grpcio)"
    return None


def answer(run_dir: Path) -> dict[str, Any]:
    """The RunHealthCheck response's fields for the node as the run left it: a successful run of the checks
    whose JSON output counts the failed ones (NVRx fails the node on ``fail_count`` > 0)."""
    check = failed_check(run_dir)
    failed = [check] if check else []
    return {"success": True, "exit_code": 0, "output": json.dumps({"fail_count": len(failed), "failed_checks": failed})}


class NodeHealthService:
    """The service of one launch: started before the launcher (NVRx looks for the socket once, at its start),
    stopped with the launch, whatever its end."""

    def __init__(self, run_dir: Path, socket: Path) -> None:
        if len(str(socket)) > MAX_SOCKET_PATH:
            raise BadInput(f"the node health socket {socket} is longer than a Unix socket path may be "
                           f"({MAX_SOCKET_PATH} characters): give the run a shorter folder (--out)")
        self.run_dir, self.socket = run_dir, socket
        stubs = nvrx_compat.node_health_stubs()
        self._pb2 = stubs.pb2
        log = run_dir / STATE / "answers.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = log

        service = self

        class Servicer(stubs.pb2_grpc.HealthCheckServiceServicer):
            def RunHealthCheck(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method's name
                return service.run_health_check(list(request.args))

        socket.unlink(missing_ok=True)
        self._server = stubs.grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        stubs.pb2_grpc.add_HealthCheckServiceServicer_to_server(Servicer(), self._server)
        self._server.add_insecure_port(f"unix:{socket}")
        self._server.start()

    def run_health_check(self, args: list[str]) -> Any:
        fields = answer(self.run_dir)
        with self._log.open("a") as log:
            log.write(json.dumps({"time": time.time(), "args": args, **fields}) + "\n")
        return self._pb2.HealthCheckResponse(**fields)

    def stop(self) -> None:
        self._server.stop(grace=None).wait()
        self.socket.unlink(missing_ok=True)

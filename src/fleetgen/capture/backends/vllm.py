"""vLLM's `extract_hidden_states` on the replicas of a capture fleet (capture/fleet_args.py).

Per row: a completion of the row's ids with max_tokens 1; the engine runs the prefill, its connector
writes the hidden states at the fleet's layers to a staging file and the answer names it
(`kv_transfer_params.hidden_states_path`). The client waits on the file's lock, reads it, checks its
token ids are the row's, keeps the wanted layers (a fleet may serve more: one fleet for eagle3 and
dflash) and deletes the staging file. The staging directory must be readable here: a local fleet, or
a shared filesystem. Each replica keeps `concurrency` rows in flight, the least loaded gets the next;
a replica that fails `max_failures` times in a row gets no more, and a failed row goes to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from fleetgen.capture.backends.base import Backend, Captured, Failed, Outcome
from fleetgen.capture.inputs import CaptureItem
from fleetgen.capture.tensors import IdsMismatch, check_ids
from fleetgen.errors import FleetgenError, NoReplicaError

log = logging.getLogger("fleetgen.capture.vllm")


@dataclass
class _Replica:
    endpoint: str
    in_flight: int = 0
    failures: int = 0


def _read_staged(path: str) -> dict[str, Any]:
    """The connector's file, once its writer has released the lock; then the file and its lock are removed."""
    import fcntl

    from safetensors.torch import load_file

    lock = path + ".lock"
    if os.path.exists(lock):
        with open(lock) as f:
            fcntl.flock(f, fcntl.LOCK_SH)  # sleeps until the engine's writer thread closes the file
    try:
        return load_file(path)
    finally:
        for p in (path, lock):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)


class VllmBackend(Backend):
    """Rows captured by completions of their ids on vLLM replicas started with the capture connector."""

    name = "vllm"

    def __init__(
        self,
        endpoints: list[str],
        model: str,
        layers: list[int],
        server_layers: list[int],
        *,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout_s: float = 600,
        max_failures: int = 3,
    ) -> None:
        super().__init__(layers)
        missing = sorted(set(layers) - set(server_layers))
        if missing:
            raise FleetgenError(
                f"the fleet captures layers {sorted(server_layers)}, not {missing}",
                hint="start the fleet with these layers (fleetgen up --capture-layers ...) or choose among its own",
            )
        self.server_layers = sorted(server_layers)
        self.pick = [self.server_layers.index(k) for k in sorted(layers)]
        self.replicas = [_Replica(e.rstrip("/")) for e in endpoints]
        self.model, self.api_key = model, api_key
        self.concurrency, self.timeout_s, self.max_failures = concurrency, timeout_s, max_failures
        self._session: Any = None

    def _live(self) -> list[_Replica]:
        return [r for r in self.replicas if r.failures < self.max_failures]

    async def _row(self, replica: _Replica, ids: list[int]) -> Any:
        from fleetgen.generate.dispatch.client import post_json

        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}
        answer = await post_json(self._session, replica.endpoint + "/v1/completions", body, self.timeout_s)
        path = (answer.get("kv_transfer_params") or {}).get("hidden_states_path")
        if not path:
            raise FleetgenError(
                f"{replica.endpoint} answered without kv_transfer_params.hidden_states_path",
                hint="start the fleet as a capture fleet (fleetgen up --capture-layers ...)",
            )
        tensors = await asyncio.to_thread(_read_staged, path)
        check_ids(tensors["token_ids"], ids, f"{replica.endpoint} ({path})")
        hs = tensors["hidden_states"]
        if hs.shape[1] != len(self.server_layers):
            raise IdsMismatch(f"{replica.endpoint} wrote {hs.shape[1]} layers, expected {len(self.server_layers)}")
        return hs[:, self.pick] if self.pick != list(range(len(self.server_layers))) else hs

    async def _item(self, item: CaptureItem) -> Outcome:
        """All rows of one item on one replica (they share a prefix: its cache helps); another on failure."""
        tried: list[str] = []
        while True:
            live = [r for r in self._live() if r.endpoint not in tried] or self._live()
            if not live:
                raise NoReplicaError("every capture replica failed", hint="check `fleetgen status` and the logs")
            replica = min(live, key=lambda r: r.in_flight)
            replica.in_flight += 1
            t0 = time.perf_counter()
            try:
                hidden = [await self._row(replica, r.input_ids) for r in item.rows]
                replica.failures = 0
                return Captured(item, hidden, time.perf_counter() - t0, replica.endpoint)
            except IdsMismatch as e:
                return Failed(item, str(e))
            except FleetgenError as e:  # TransientError, Rejected and the rest: this replica, this time
                replica.failures += 1
                tried.append(replica.endpoint)
                log.warning("capture of %s#%d on %s failed: %s", item.id, item.sample, replica.endpoint, e.message)
                if len(tried) >= 2 * len(self.replicas):
                    return Failed(item, e.message)
            finally:
                replica.in_flight -= 1

    async def outcomes(self, items: Iterable[CaptureItem]) -> AsyncIterator[Outcome]:  # type: ignore[override]
        from fleetgen.generate.dispatch.client import new_session

        limit = self.concurrency * len(self.replicas)
        self._session = new_session(self.api_key, limit)
        pending: set[asyncio.Task] = set()
        source = iter(items)
        exhausted = False
        try:
            while True:
                while not exhausted and len(pending) < limit:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        break
                    pending.add(asyncio.create_task(self._item(item)))
                if not pending:
                    return
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    yield task.result()
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self._session.close()

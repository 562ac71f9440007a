"""fleetgen's hidden-states KV connector for vLLM: the stock one, made to run on CPU and to write whole files.

vLLM loads it by `kv_connector_module_path` (capture/fleet_args.py). vLLM's ExampleHiddenStatesConnector
copies each finished request's hidden states out of the KV cache into pinned host memory on a CUDA
stream; vLLM-CPU has neither (the engine dies: `pin_memory=True requires a CUDA or other accelerator
backend`). On CPU this one copies them out of the cache directly. On every device the file is written to
a temporary name and renamed, so a reader that skips the lock file still never sees half a file.
Only this module imports vLLM; it runs inside the engine's process, never in fleetgen's.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)

__all__ = ["FleetgenHiddenStatesConnector"]


class _Done:
    """A copy that finished when it was made: what the CPU path gives get_finished instead of a CUDA event."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class FleetgenHiddenStatesConnector(ExampleHiddenStatesConnector):
    """ExampleHiddenStatesConnector that runs on vLLM-CPU and renames each file into place once written."""

    @staticmethod
    def _write_tensors(tensors: dict[str, torch.Tensor], event: Any, filename: str, lock_fd: int | None) -> None:
        try:
            event.synchronize()
            tmp = f"{filename}.{os.getpid()}.tmp"
            save_file({k: v.contiguous() for k, v in tensors.items()}, tmp)
            os.replace(tmp, filename)  # whole or absent; the client fsyncs its own copy, not this staging file
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # releases LOCK_EX: a client waiting on LOCK_SH reads now

    def _submit_async_write(self, pending: PendingSave) -> None:
        if self._kv_cache is None or self._kv_cache.device.type != "cpu":
            return super()._submit_async_write(pending)
        if not self._is_tp_rank_zero:
            return
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (blocks.reshape(-1, 1) * self._block_size + offsets.reshape(1, -1)).flatten()
        n = pending.token_ids.shape[0]
        # A copy, not a view: the blocks are freed (and reused) once get_finished reports the request done.
        hidden = extract_from_kv_cache(self._kv_cache, slots, n).clone()
        tensors = {"hidden_states": hidden, "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            import fcntl

            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        future = self._executor.submit(self._write_tensors, tensors, _Done(), pending.filename, lock_fd)
        self._req_copy_events[pending.req_id] = _Done()  # type: ignore[assignment]
        self._req_futures[pending.req_id] = future
        future.add_done_callback(partial(self._on_write_done, pending.req_id))

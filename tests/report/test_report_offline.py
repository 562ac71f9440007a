"""The report (and the tokens export) on a node without network (issue 41): no connect beyond this machine.

On a GPU node the report asked huggingface.co for the tokenizer of the served name `model` (24 failed
lookups, 90 s), then counted characters. Here the network is blocked for real at the socket layer
(every name lookup and connect to a non-loopback address is refused and recorded), the Hugging Face
offline switches are off and its cache is empty, and the committed SmolLM2 run is served as `model`.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import shutil
import socket
from pathlib import Path

import pytest

from fleetgen.models.registry import embedded_path
from fleetgen.report import build_report

RUN = Path(__file__).parents[1] / "export" / "fixtures" / "smollm2-run"


def _local(host: object) -> bool:
    if not isinstance(host, str):
        return True  # an AF_UNIX path
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def no_network(monkeypatch, tmp_path) -> list[str]:
    """Block every lookup and connect beyond loopback; the list records each attempt."""
    attempts: list[str] = []
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if not _local(host):
            attempts.append(f"connect {host}")
            raise OSError(errno.ENETUNREACH, "network blocked by the test")
        return real_connect(self, address)

    def connect_ex(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if not _local(host):
            attempts.append(f"connect {host}")
            return errno.ENETUNREACH
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _local(host.decode() if isinstance(host, bytes) else host):
            attempts.append(f"lookup {host}")
            raise socket.gaierror(socket.EAI_NONAME, "network blocked by the test")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty hub cache
    return attempts


def served_as_model(tmp_path: Path) -> Path:
    """The committed run as a GPU fleet serves it: the served name `model`, the model's path unknown."""
    out = tmp_path / "run"
    shutil.copytree(RUN, out)
    job = json.loads((out / "job.json").read_text())
    job["model"] = "model"
    (out / "job.json").write_text(json.dumps(job))
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    (out / "results.jsonl").write_text("".join(json.dumps({**r, "model": "model"}) + "\n" for r in rows))
    return out


def test_a_hub_lookup_is_blocked_and_recorded(no_network):
    """The blocker records what a hub lookup does, so an empty record below means none was made."""
    with pytest.raises(OSError):
        socket.create_connection(("huggingface.co", 443), timeout=5)
    assert no_network == ["lookup huggingface.co"]


def test_the_report_asks_no_hub_and_counts_from_the_ids(no_network, tmp_path):
    out = served_as_model(tmp_path)
    md = build_report(out, dest=tmp_path / "report").read_text()
    assert no_network == []
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert (
        f"| completion tokens (all {len(rows)} result rows) | {sum(r['usage']['completion_tokens'] for r in rows)} |"
        in md
    )
    assert (
        "| tokenizer (for the round trip) | none: no tokenizer on this machine for the run's model 'model' "
        "(no model hub is asked) |" in md
    )


def test_the_tokenizer_comes_from_the_fleet_s_model_path_the_run_recorded(no_network, tmp_path):
    model = embedded_path("smollm2")
    if not (model / "tokenizer.json").is_file():
        pytest.skip("the embedded model is not prepared (scripts/setup.sh prepares it)")
    out = served_as_model(tmp_path)
    first = json.loads((out / "results.jsonl").read_text().splitlines()[0])["timing"]["started_at"]
    (out / "runs.jsonl").write_text(
        json.dumps({"run": "r1", "event": "start", "at": first - 1, "shard": "", "job": None, "model_path": str(model)})
        + "\n"
    )
    md = build_report(out, dest=tmp_path / "report").read_text()
    assert no_network == []
    assert f"| tokenizer (for the round trip) | {model} |" in md


def test_the_tokens_export_asks_no_hub_either(no_network, tmp_path):
    from fleetgen.errors import InputError
    from fleetgen.export import ExportConfig, export

    out = served_as_model(tmp_path)
    with pytest.raises(InputError, match="no tokenizer on this machine for the run's model 'model'"):
        export(ExportConfig(results_dir=out, output=tmp_path / "t.parquet", format="tokens"))
    assert no_network == []
    model = embedded_path("smollm2")
    if not (model / "tokenizer.json").is_file():
        pytest.skip("the embedded model is not prepared (scripts/setup.sh prepares it)")
    first = json.loads((out / "results.jsonl").read_text().splitlines()[0])["timing"]["started_at"]
    (out / "runs.jsonl").write_text(
        json.dumps({"run": "r1", "event": "start", "at": first - 1, "shard": "", "job": None, "model_path": str(model)})
        + "\n"
    )
    s = export(ExportConfig(results_dir=out, output=tmp_path / "t.parquet", format="tokens"))
    assert sum(s.written.values()) > 0 and no_network == []

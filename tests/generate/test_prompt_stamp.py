"""The prompt file's stamp (stamp.py): a resume skips hashing an unchanged prompt file, never a changed one."""

from __future__ import annotations

import hashlib
import os

import pytest

from fleetgen.generate.prompts import stamp
from fleetgen.generate.prompts.stamp import STAMP, stamped_fingerprint


@pytest.fixture
def settled(monkeypatch):
    """Files count as settled at once (the racy window is for coarse clocks; a test must not wait it out)."""
    monkeypatch.setattr(stamp, "RACY_S", -3600.0)


def _no_hashing(monkeypatch):
    def refuse(path):
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(stamp, "fingerprint", refuse)


def test_an_unchanged_file_is_not_hashed_again(tmp_path, settled, monkeypatch):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"id": 1}\n{"id": 2}\n')
    first = stamped_fingerprint(prompts, tmp_path)
    assert first == (hashlib.sha256(prompts.read_bytes()).hexdigest(), 2) and (tmp_path / STAMP).exists()
    _no_hashing(monkeypatch)
    assert stamped_fingerprint(prompts, tmp_path) == first


def test_a_same_size_edit_with_its_mtime_put_back_is_seen(tmp_path, settled):
    """Only ctime betrays it (no user call sets ctime back): the stamp must not match."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"id": 1}\n')
    before = os.stat(prompts)
    stamped_fingerprint(prompts, tmp_path)
    with open(prompts, "r+b") as f:
        f.write(b'{"id": 7}\n')
    os.utime(prompts, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(prompts).st_size == before.st_size and os.stat(prompts).st_mtime_ns == before.st_mtime_ns
    assert stamped_fingerprint(prompts, tmp_path)[0] == hashlib.sha256(b'{"id": 7}\n').hexdigest()


def test_a_replaced_file_is_hashed(tmp_path, settled):
    prompts, other = tmp_path / "p.jsonl", tmp_path / "q.jsonl"
    prompts.write_bytes(b'{"id": 1}\n')
    stamped_fingerprint(prompts, tmp_path)
    other.write_bytes(b'{"id": 2}\n')
    st = os.stat(prompts)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, prompts)  # same size and mtime, another inode
    assert stamped_fingerprint(prompts, tmp_path)[0] == hashlib.sha256(b'{"id": 2}\n').hexdigest()


def test_a_file_changed_within_the_racy_window_is_not_stamped(tmp_path, monkeypatch):
    monkeypatch.setattr(stamp, "RACY_S", 3600.0)  # everything is "just written"
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"id": 1}\n')
    stamped_fingerprint(prompts, tmp_path)
    assert not (tmp_path / STAMP).exists()


def test_a_damaged_stamp_means_hashing(tmp_path, settled):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"id": 1}\n')
    (tmp_path / STAMP).write_bytes(b'{"path": 3')
    assert stamped_fingerprint(prompts, tmp_path)[0] == hashlib.sha256(b'{"id": 1}\n').hexdigest()

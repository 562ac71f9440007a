"""CPU replicas that Ray puts on one host claim disjoint cores; a claim dies with its holder."""

from __future__ import annotations

import os
import subprocess
import sys

from fleetgen.fleet.devices import claim_cores


def test_claims_on_one_host_are_disjoint_until_released(tmp_path):
    a, a_fds = claim_cores(2, tmp_path, cores=[0, 1, 2])
    b, b_fds = claim_cores(2, tmp_path, cores=[0, 1, 2])
    assert a == (0, 1) and b == (2,)  # only one core was left
    none, _ = claim_cores(1, tmp_path, cores=[0, 1, 2])
    assert none == ()
    for fd in a_fds:
        os.close(fd)
    again, fds = claim_cores(1, tmp_path, cores=[0, 1, 2])
    assert again == (0,)
    for fd in fds + b_fds:
        os.close(fd)


def test_a_dead_holder_leaves_its_cores_free(tmp_path):
    code = (
        "import sys; from pathlib import Path; from fleetgen.fleet.devices import claim_cores;"
        "print(claim_cores(2, Path(sys.argv[1]), cores=[4, 5])[0])"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(4, 5)"
    cores, fds = claim_cores(2, tmp_path, cores=[4, 5])  # the holder exited without releasing
    assert cores == (4, 5)
    for fd in fds:
        os.close(fd)

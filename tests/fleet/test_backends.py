"""Every backend implements the whole seam (fleet/backend.py) with the seam's own signatures."""

from __future__ import annotations

import inspect

import pytest

from fleetgen.fleet.backend import Backend
from fleetgen.fleet.backend_lookup import backend_for
from fleetgen.fleet.local import LocalBackend
from fleetgen.fleet.state import FleetState


def _backends() -> list[type]:
    found = [LocalBackend]
    try:
        from fleetgen.fleet.ray_backend import RayBackend
    except ImportError:  # the optional `ray` extra
        return found
    return [*found, RayBackend]


SEAM_METHODS = {n: f for n, f in vars(Backend).items() if inspect.isfunction(f) and not n.startswith("_")}
SEAM_FIELDS = set(Backend.__annotations__)


@pytest.mark.parametrize("cls", _backends(), ids=lambda c: c.__name__)
def test_backend_has_every_seam_member_with_its_signature(cls):
    assert SEAM_METHODS and SEAM_FIELDS == {"name"}
    for name, seam in SEAM_METHODS.items():
        impl = getattr(cls, name, None)
        assert impl is not None, f"{cls.__name__} lacks {name}"
        assert list(inspect.signature(impl).parameters) == list(inspect.signature(seam).parameters), name
        assert inspect.iscoroutinefunction(impl) == inspect.iscoroutinefunction(seam), name
    assert isinstance(cls.name, str)


def test_the_state_names_its_backend_class():
    state = FleetState(engine="vllm", model="m", served_model_name="m")
    assert type(backend_for(state)) is LocalBackend and LocalBackend.name == state.backend
    assert set(FleetState.model_fields["backend"].annotation.__args__) == {c.name for c in _backends()} | {"ray"}

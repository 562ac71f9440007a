"""The doctor's expectation of the token-id path, by engine version."""

from fleetgen.doctor.report import Status
from fleetgen.doctor.token_path import check_token_path


def test_sglang_before_0_5_17_expects_the_native_path():
    c = check_token_path("sglang", {"sglang": "0.5.12"})
    assert c.status is Status.OK and c.evidence["path"] == "native" and "/generate" in c.summary


def test_sglang_0_5_17_and_later_keep_the_chat_path():
    for v in ("0.5.17", "0.5.23.post1", "0.6.0rc1"):
        assert check_token_path("sglang", {"sglang": v}).evidence["path"] == "chat", v


def test_unknown_version_is_left_to_the_probe():
    assert check_token_path("sglang", {}).status is Status.SKIP

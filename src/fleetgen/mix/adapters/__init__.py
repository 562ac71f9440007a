"""The adapter registry: one module per dataset schema, looked up by the recipe's `adapter` name."""

from __future__ import annotations

from fleetgen.errors import ConfigError
from fleetgen.mix.adapters.agentinstruct import AgentInstruct
from fleetgen.mix.adapters.alpaca import Alpaca
from fleetgen.mix.adapters.base import Adapter, Converted
from fleetgen.mix.adapters.codefeedback import CodeFeedback
from fleetgen.mix.adapters.hermes_function_calling import HermesFunctionCalling
from fleetgen.mix.adapters.infinity_instruct import InfinityInstruct
from fleetgen.mix.adapters.metamathqa import MetaMathQA
from fleetgen.mix.adapters.openai_messages import OpenAIMessages
from fleetgen.mix.adapters.sharegpt import ShareGPT
from fleetgen.mix.adapters.specforge import SpecForge
from fleetgen.mix.adapters.webinstructsub import WebInstructSub

ADAPTERS: dict[str, type[Adapter]] = {
    cls.name: cls
    for cls in (
        InfinityInstruct,
        WebInstructSub,
        CodeFeedback,
        MetaMathQA,
        HermesFunctionCalling,
        AgentInstruct,
        ShareGPT,
        OpenAIMessages,
        Alpaca,
        SpecForge,
    )
}


def get_adapter(name: str) -> Adapter:
    """A fresh adapter by recipe name; an unknown name is a ConfigError listing the known ones."""
    cls = ADAPTERS.get(name)
    if cls is None:
        raise ConfigError(f"unknown adapter {name!r}", hint=f"known adapters: {', '.join(sorted(ADAPTERS))}")
    return cls()


__all__ = ["ADAPTERS", "Adapter", "Converted", "get_adapter"]

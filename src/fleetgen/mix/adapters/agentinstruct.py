"""THUDM/AgentInstruct: agent trajectories (OS, database, ALFWorld, WebShop, KG, Mind2Web) as ShareGPT rows.

One split per task (`os`, `db`, `alfworld`, `webshop`, `kg`, `mind2web`; `split: os+db+...` reads
several); each row is `conversations` [{from, value, loss}] and an `id`, read as generic ShareGPT
(sharegpt.py keeps the loss flags). License: the dataset card states none (a question asking for one,
discussion #5, went unanswered), so its prompts record `unknown` and commercial use `unknown`; set
`sources[].license` in the recipe once you know better.
"""

from __future__ import annotations

from typing import Any

from fleetgen.mix.adapters.base import Converted
from fleetgen.mix.adapters.sharegpt import ShareGPT


class AgentInstruct(ShareGPT):
    name = "agentinstruct"
    description = "THUDM/AgentInstruct: agent trajectories (ShareGPT with loss flags), one split per task"
    license = None  # none on the dataset card: recorded as unknown

    def convert(self, row: dict[str, Any]) -> Converted:
        conv = super().convert(row)
        conv.source_domain = ("agent", "label:dataset")
        return conv

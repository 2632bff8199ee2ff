"""Version 2 of ``rerun-shop`` (see ``tests.integration.rerun_shop``)."""

from __future__ import annotations

from durable_agents import agent
from tests.integration.rerun_shop import shop

rerun_shop_v2 = agent(name="rerun-shop", version="2")(shop(fixed=True))

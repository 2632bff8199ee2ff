"""Version 3 of ``rerun-shop`` (see ``tests.integration.rerun_shop``)."""

from __future__ import annotations

from durable_agents import agent
from tests.integration.rerun_shop import shop

rerun_shop_v3 = agent(name="rerun-shop", version="3")(shop(fixed=True, extra_cents=100))

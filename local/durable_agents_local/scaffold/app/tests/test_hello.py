"""The example agent, run in-process on a journal with a skip-clock (no AWS, no waiting)."""

from agents.hello import Greeting, hello

from durable_agents_local.testing import AgentTestRunner, Crash


def test_hello_greets_after_its_pause() -> None:
    """The skip-clock jumps over the hour's pause."""
    result = AgentTestRunner(hello).run(Greeting(name="Ada", pause_seconds=3600))
    assert result.status == "SUCCEEDED"
    assert result.output == "Hello, Ada! (from your own app)"


def test_a_crash_replays_the_recorded_step() -> None:
    """One operation per invocation, as on Lambda; the process dies before "sign" runs."""
    runner = AgentTestRunner(hello, mode="faithful")
    result = runner.run({"name": "Grace"}, crash=Crash("sign"))
    assert result.output == "Hello, Grace! (from your own app)"
    assert result.crashes == 1
    assert result.operation("compose").attempts == 1

"""The durable-agents demo: kill -9 the worker mid-step and mid-payment; a person approves.

What it does (no AWS account, no Docker; about a minute):

Part 1, a step:

1. starts a moto server process (the journal lives there) and a worker process
   (``durable-agents local``), on free loopback ports;
2. starts a run of the example agent ``example-research`` over HTTP;
3. waits until step ``fetch-2`` is running, then kills the worker with SIGKILL;
4. starts a new worker, which picks the run up where the journal says it is;
5. prints the run's timeline and checks, from the journal, that every recorded step ran
   exactly once and only the interrupted step ran again.

Part 2, a side effect (the PREPARE → EXECUTE → COMMIT sandwich):

1. starts the fake payments/email/tickets providers as their own process, and a worker with
   ``--crash-at charge-card:after_execute``;
2. starts an ``example-checkout`` run: price, charge the card, open a ticket, send an email;
3. the worker SIGKILLs itself right after the payment provider charged the card and before
   the journal recorded it: the provider's ledger has the charge, the journal a PREPARED call;
4. starts a new worker; once the dead worker's lease on the call expires, recovery asks the
   provider (lookup by idempotency key), finds the charge and records it, never charging again;
5. prints the timeline (journal and ledgers) and checks exactly one charge, one ticket, one
   email;
6. re-runs the finished run from its start (``POST /runs/{id}/rerun``): the charge, the
   ticket and the email are reused from the ledger, and no provider's ledger changes.

Part 3, the agent layer and a person in the loop:

1. starts the fake providers again and a worker (no crash);
2. starts an ``example-support`` run over HTTP: a ``triage`` sub-agent (its own run), then a
   tool-use loop with a scripted model: lookup-order, then issue-refund and create-ticket in
   parallel; the 65 EUR refund is above the 50 EUR threshold, so the run SUSPENDs until someone
   in ``group:support-leads`` approves that exact refund;
3. reads the pending approval (``GET /approvals?status=pending``), mints a signed link for the
   approver (``POST /approvals/{id}/links``), prints it and the equivalent ``curl``, and decides
   through that link over HTTP, as the curl would;
4. reads the streamed model text as a browser would (server-sent events), reconnecting after a
   cursor with ``Last-Event-ID``;
5. prints the timeline and checks: the run SUCCEEDED, the model was asked once per recorded
   turn, exactly one refund payout and one ticket, and the decision names the link's approver.

Part 4, the whole stack killed (``scripts/demo_durable.py``): ``durable-agents local`` on a
state directory; a checkout pays, a refund waits for an approval; SIGKILL to local mode (which
holds the journal) and the providers; restarted at once on the same state and ports, the
waiting run is there, the link minted before the crash approves it, the same Idempotency-Key
returns the same run, and each payment is in the ledger exactly once.

Part 5, flow control (``scripts/demo_flow.py``): local mode with the examples of
``functions/agents/flow.py``. Nine ``batch-worker`` runs of two customers under
``Concurrency(limit=3, key="input.customer")``, watched live: never more than three RUNNING,
all succeed, the second customer is not served after all of the first. A ``research-lead``
tree under a token ``Budget`` pauses ``BUDGET_EXCEEDED``; ``POST /runs/{id}/budget`` extends it
with a reason and the tree succeeds, each model call counted once. A burst over a model's
``requests_per_minute``: the calls over it wait on a durable timer (only its first seconds are
shown; the periods are real minutes).

Exit status 0 only if every check of every part holds. Run it with ``make demo``.

Parts 1 to 3 are ``demo_step.py``, ``demo_side_effect.py`` and ``demo_support.py`` (what they
share: ``demo_common.py``); this module runs the five parts in order and gives the verdict.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from demo_common import banner, worker_line
from demo_durable import part_four
from demo_flow import part_five
from demo_side_effect import CHECKOUT_INPUT, part_two
from demo_step import part_one
from demo_support import APPROVER, SUPPORT_INPUT, part_three

from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.processes import WorkerProcess

ROOT = Path(__file__).resolve().parent.parent
WORK_SECONDS = "1"  # each fetch/summarize step sleeps this long: time to kill it mid-step


def demo() -> int:
    started = time.monotonic()
    moto = MotoProcess(free_port())
    env = {"EXAMPLE_WORK_SECONDS": WORK_SECONDS}
    workers: list[WorkerProcess] = []

    def new_worker(label: str, args: Sequence[str]) -> WorkerProcess:
        worker = WorkerProcess(
            api_port=free_port(),
            moto_endpoint=moto.endpoint,
            store_key=moto.store_key,
            args=args,
            cwd=ROOT,
            env=env,
            on_line=worker_line(label),
        )
        workers.append(worker)
        worker.start()
        return worker

    try:
        first_ok = part_one(moto, new_worker)
        part_one_seconds = time.monotonic() - started
        for worker in workers:  # part 2's workers alone take its events
            worker.stop()
        with tempfile.TemporaryDirectory(prefix="durable-agents-demo-") as state_dir:
            second_ok = part_two(moto, new_worker, Path(state_dir))
            part_two_seconds = time.monotonic() - started - part_one_seconds
            for worker in workers:  # part 2's worker points at part 2's providers
                worker.stop()
            third_ok = part_three(moto, new_worker, Path(state_dir))
            part_three_seconds = time.monotonic() - started - part_one_seconds - part_two_seconds
            for worker in workers:
                worker.stop()
            fourth_ok = part_four(
                Path(state_dir),
                banner=banner,
                on_line=worker_line("worker 6"),
                checkout_input=CHECKOUT_INPUT,
                support_input=SUPPORT_INPUT,
                approver=APPROVER,
            )
            part_four_seconds = (
                time.monotonic()
                - started
                - sum((part_one_seconds, part_two_seconds, part_three_seconds))
            )
            fifth_ok = part_five(Path(state_dir), banner=banner, on_line=worker_line("worker 7"))
        elapsed = time.monotonic() - started
        part_five_seconds = (
            elapsed - part_one_seconds - part_two_seconds - part_three_seconds - part_four_seconds
        )
        verdicts = [
            f"part {n} {'passed' if ok else 'FAILED'} ({seconds:.1f} s)"
            for n, ok, seconds in (
                (1, first_ok, part_one_seconds),
                (2, second_ok, part_two_seconds),
                (3, third_ok, part_three_seconds),
                (4, fourth_ok, part_four_seconds),
                (5, fifth_ok, part_five_seconds),
            )
        ]
        print("\n" + ", ".join(verdicts))
        if first_ok and second_ok and third_ok and fourth_ok and fifth_ok:
            print(f"demo passed in {elapsed:.1f} s")
            return 0
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the demo reports any failure and exits 1
        print(f"\ndemo FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for worker in workers:
            worker.stop()
        moto.stop()


if __name__ == "__main__":
    # A plain `kill` also cleans up the child processes (SystemExit runs the finally block).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(demo())

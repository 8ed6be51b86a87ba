"""The receive budget: how many SQS receives one message may need, hence the queue's maxReceiveCount.

Every receive of a message counts toward its queue's maxReceiveCount; one more and SQS moves it
to the dead-letter queue. The daemon spends receives only where it must:

- waiting for another attempt that holds the request (a duplicate copy, a lease not yet lapsed
  after a takeover): 0, it waits in process with the message kept hidden;
- a store it cannot reach, an SNS signing certificate it cannot fetch: 0, it retries in process
  with backoff, the message kept hidden;
- a long-running action waiting for its polls: 0, the message is deleted once the progress is
  stored (cfn_provider.pipeline.poll_steps); later copies of it are deleted as duplicates;
- a graceful stop of the daemon holding it (deploy, scale-in, reboot): 1 each (handed back);
- a daemon killed while holding it (SIGKILL, OOM, lost host): 1 each (it comes back after its
  visibility timeout; the takeover happens on that receive);
- a receive SQS applied but whose answer was lost, or a visibility extension that failed long
  enough for the message to reappear: 1 each;
- a delete that failed after the answer went out: 1 (the next receive finds it answered).

    maxReceiveCount = 1 + STOPS + KILLS + LOST + DELETES + SLACK
                    = 1 +   2   +   2   +  3   +    1    +   1   = 10

A higher count costs time only for what cannot be processed: a message that is not a request is
received maxReceiveCount times, one visibility timeout apart, before it reaches the DLQ (10 x 60 s
by default), so keep maxReceiveCount x visibility timeout well inside your ServiceTimeout.
"""

from __future__ import annotations

FIRST = 1  # the delivery itself
STOPS = 2  # graceful stops of the daemon holding it (a rolling deploy can meet a message twice)
KILLS = 2  # daemons killed while holding it
LOST = 3  # receives applied whose answer was lost, visibility extensions that failed
DELETES = 1  # deletes that failed after the answer was sent
SLACK = 1


def max_receive_count(
    stops: int = STOPS, kills: int = KILLS, lost: int = LOST, deletes: int = DELETES, slack: int = SLACK
) -> int:
    """The queue's maxReceiveCount for a worst case of that many of each event per message."""
    return FIRST + stops + kills + lost + deletes + slack


MAX_RECEIVE_COUNT = max_receive_count()  # bootstrap's and deploy/provider.yaml's default

"""The pipeline: one message from receive to answer (poller, worker, parsing, routing, running, responding)."""

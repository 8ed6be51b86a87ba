"""The intakes: what feeds the worker (queue poller, web listener, dead-letter watcher, poll scheduler)."""

"""One job as N shards at once: local processes or Ray tasks, each a generate() of its own slice."""

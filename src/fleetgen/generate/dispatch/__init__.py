"""Transport and dispatch: one request to one server, which replica serves it, how many in flight, warm-up."""

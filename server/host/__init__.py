"""One host of processes: the supervisor, its workers and engines, and what joins them."""

"""Domain types: resources, tasks, jobs, nodes, queues.  No I/O here."""

"""SQL text to expression trees: CREATE statements, WHERE predicates, partition and sort keys."""

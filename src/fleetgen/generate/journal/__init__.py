"""The output directory as a crash-safe journal: what is recorded,
the resume checkpoint and its indexes, the one writer."""

"""What a run shows while it runs and leaves behind: counters, the summary, the progress file and metrics page."""

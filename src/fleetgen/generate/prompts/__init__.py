"""Reading the prompt file: rows normalized, their fingerprint, and the work list a run walks."""

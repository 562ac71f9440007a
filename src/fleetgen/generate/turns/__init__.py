"""Conversation semantics: regenerating each assistant turn
of a sample on policy (tools, reasoning, token ids, path)."""

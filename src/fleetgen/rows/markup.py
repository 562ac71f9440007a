"""The markup of a reasoning block in raw text, as the engines' reasoning parsers split it."""

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

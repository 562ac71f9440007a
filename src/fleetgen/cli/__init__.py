"""The `fleetgen` command: a thin layer that parses flags into config and calls the library."""

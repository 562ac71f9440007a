"""Models fleetgen knows by name; any other string is a path or hub id handed to the engine."""

from fleetgen.models.registry import EMBEDDED_MODELS, model_cache_dir, resolve_model, served_name_for

__all__ = ["EMBEDDED_MODELS", "model_cache_dir", "resolve_model", "served_name_for"]

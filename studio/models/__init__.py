"""Qt item models over the store and the engine's records."""

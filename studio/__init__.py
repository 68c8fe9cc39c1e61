"""Proctor's studio: Qt views over the engine's store and events. Only subscribes."""

"""The phases of a trial, one module per phase or group of phases."""

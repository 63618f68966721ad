"""Programs the platform runs inside a trial's process (`python -m stratus.harness.exec.<name>`)."""

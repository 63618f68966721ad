"""Programs the platform runs inside a trial's process (`python -m harness.exec.<name>`)."""

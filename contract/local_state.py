"""The folders the embedded local stack keeps its state in, under its state folder (`~/.stratus/local`):
written by `infra/local/persistence.py`, removed by `det deploy local down --delete-db`."""

from __future__ import annotations

#: DynamoDB items and CloudWatch log events: a snapshot and the journal of writes since.
DATABASE_DIR = "db"
#: S3 objects (contexts, checkpoints), one file per object.
OBJECTS_DIR = "s3"
#: The agents' run folders (each run's context, its process record).
AGENTS_DIR = "agents"

#: Everything `--delete-db` removes.
STATE_DIRS = (DATABASE_DIR, OBJECTS_DIR, AGENTS_DIR)
#: The agents a running stack started (pid and start time), so its next start can end them after a kill -9.
AGENTS_RECORD = "agents.json"

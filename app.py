"""Stratus's control plane as one Chalice app: wiring only. Routes and event handlers live in
`chalicelib/` blueprints; each route's registration (`chalicelib/api/routing.py`) checks the caller's
credential, parses the body and turns every error into a JSON body, once for every route (why not
Chalice middleware: see `routing._errors_as_json`)."""

from __future__ import annotations

import logging

from chalice.app import Chalice

from chalicelib.api import (
    compute_routes,
    job_routes,
    lifecycle_routes,
    monitoring_routes,
    stop_routes,
    user_routes,
)
from chalicelib.handlers import events, submissions

app = Chalice(app_name="stratus")
app.log.setLevel(logging.INFO)
app.register_blueprint(user_routes.bp)
app.register_blueprint(compute_routes.bp)
app.register_blueprint(stop_routes.bp)
app.register_blueprint(lifecycle_routes.bp)
app.register_blueprint(job_routes.bp)
app.register_blueprint(events.bp)
app.register_blueprint(monitoring_routes.bp)
app.register_blueprint(submissions.bp)

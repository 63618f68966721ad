"""User-facing monitoring routes (IAM-authorized in AWS): an experiment's CloudWatch dashboard
(`chalicelib.services.telemetry`). The control plane writes it, so the IAM to do so stays in the stack
(`PutDashboard` on `<stack>-*` dashboards only) and the route works on the local stack through moto."""

from __future__ import annotations

from chalice.app import Blueprint
from pydantic import BaseModel

from chalicelib.api.auth import UserPrincipal
from chalicelib.api.routing import route
from chalicelib.services import telemetry
from chalicelib.wiring import ports

bp = Blueprint(__name__)


class ExperimentDashboard(BaseModel):
    #: The dashboard's name (`<stack>-experiment-<id>`) and where the CloudWatch console shows it.
    name: str
    url: str
    #: The trials it charts.
    trials: int


@route(bp, "/experiments/{experiment_id}/dashboard", "POST", response=ExperimentDashboard, auth="iam")
def experiment_dashboard(user: UserPrincipal, experiment_id: int) -> ExperimentDashboard:
    """Create or update the experiment's CloudWatch dashboard: every trial's learning curves, the best
    searcher metric, the slots of its pool."""
    made = telemetry.experiment_dashboard(ports(), experiment_id)
    return ExperimentDashboard(name=made.name, url=made.url, trials=made.trials)

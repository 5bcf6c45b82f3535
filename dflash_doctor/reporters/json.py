from __future__ import annotations

import json

from ..model import CheckReport, HostOutcome, fleet_json


class JsonReporter:
    def render(self, report: CheckReport, terminal: bool) -> str:
        return json.dumps(report.to_json(), indent=2) + "\n"

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        return json.dumps(fleet_json(outcomes), indent=2) + "\n"

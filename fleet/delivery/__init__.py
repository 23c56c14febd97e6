"""Reply delivery: where a task's reply goes, each attempt journaled (see fleet.domain.delivery).

``targets`` says where a task's reply goes and renders the request; ``http`` sends one attempt;
``deliverer`` runs attempts off the hot path (a Celery task in a fleet, a thread embedded).
"""

from fleet.delivery.deliverer import Deliverer

__all__ = ["Deliverer"]

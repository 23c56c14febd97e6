"""Property-based run of every operation in ``/openapi.json`` against `fleet serve`: no 5xx.

Schemathesis generates valid (positive) and invalid (negative) requests from the schema; the
server answers each one with a documented status, content type and body, and never with a
server error. (Schemathesis' own pytest plugin does not run on pytest 9 yet, so the operations
are driven from one test with Hypothesis directly.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks

from tests.integration.test_api import OPS_KEY, write_callers
from tests.support.fleet import running_fleet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(600)]

AUTH = {"Authorization": f"Bearer {OPS_KEY}"}
#: Examples per operation and generation mode.
EXAMPLES = 60
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


@pytest.fixture
def api_schema(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path
) -> Iterator[schemathesis.BaseSchema]:
    config = write_callers(config_dir)
    ops = config / "callers" / "ops.toml"  # an operator: the operator-only routes run for real
    ops.write_text(ops.read_text() + "operator = true\n")
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config
    ) as fleet:
        fleet.worker("w1")
        url = fleet.serve()
        yield schemathesis.openapi.from_url(f"{url}/openapi.json")
        fleet.kill()  # the test is over: no graceful stop to wait for


def run_operation(operation: object, mode: GenerationMode) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))  # type: ignore[attr-defined]
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
        ],
    )
    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=30)

    check()


def test_no_operation_answers_with_a_server_error(api_schema: schemathesis.BaseSchema) -> None:
    failures: list[str] = []
    tried: list[str] = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        for mode in GenerationMode:
            tried.append(f"{operation.label} ({mode.value})")
            try:
                run_operation(operation, mode)
            except Unsatisfiable:
                continue  # nothing to make invalid (an operation without parameters)
            except (Exception, BaseExceptionGroup) as exc:  # report every operation's failure
                failures.append(f"{operation.label} ({mode.value}):\n{exc}")
    assert len(tried) >= 2 * 8, tried  # the five task operations and the ops endpoints at least
    assert not failures, "\n\n".join(failures)

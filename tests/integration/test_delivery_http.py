"""One delivery attempt against a real local receiver: bounded by one overall deadline, so an
attempt cannot outlive its claim (and be sent again) however slowly an answer arrives."""

from __future__ import annotations

import time

import pytest

from fleet.delivery.http import send
from fleet.delivery.targets import Request
from tests.support.receiver import Receiver

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.timeout(60), pytest.mark.serial]


def post(receiver: Receiver, path: str) -> Request:
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k"}
    return Request("POST", f"{receiver.url}{path}", headers, b"{}")


def test_a_200_whose_body_drips_is_sent_within_the_deadline(receiver: Receiver) -> None:
    began = time.monotonic()
    sent = send(post(receiver, "/drip/1"), 1.0)
    took = time.monotonic() - began
    assert (sent.result, sent.http_status) == ("sent", 200)
    assert took < 2.0, f"the attempt took {took:.1f}s past its 1s deadline"
    assert sent.detail.startswith("x") and "cut off" in sent.detail


def test_no_answer_within_the_deadline_is_unknown(receiver: Receiver) -> None:
    began = time.monotonic()
    sent = send(post(receiver, "/hang/1"), 0.5)
    assert (sent.result, sent.http_status) == ("unknown", None)
    assert time.monotonic() - began < 1.5


def test_an_answer_is_classified_by_its_status(receiver: Receiver) -> None:
    assert send(post(receiver, "/ok/1"), 5.0).result == "sent"
    flaky = send(post(receiver, "/flaky/1"), 5.0)
    assert (flaky.result, flaky.http_status) == ("retry", 500)
    assert flaky.detail.startswith("status 500")


def test_no_connection_is_worth_a_retry() -> None:
    sent = send(Request("POST", "http://127.0.0.1:9/x", {}, b"{}"), 2.0)
    assert (sent.result, sent.http_status) == ("retry", None)

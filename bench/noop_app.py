"""Baseline for bench/dispatch.py: a raw Celery no-op task on the same broker and settings."""

from __future__ import annotations

import os
import time

import redis

from fleet.config import load_settings
from fleet.dispatch.celery_app import make_app

URL = os.environ.get("FLEET_BENCH_REDIS", "redis://127.0.0.1:6379/14")
app = make_app(URL, events=load_settings().celery_events)  # fleet's workers' settings
app.conf.include = []
_r = redis.Redis.from_url(URL)


@app.task(name="bench.noop", ignore_result=True)
def noop(sent_at: float) -> None:
    """Does nothing but note when it started (one pipelined Redis write)."""
    started = time.time()
    pipe = _r.pipeline(transaction=False)
    pipe.rpush("bench:noop:lat", started - sent_at)
    pipe.rpush("bench:noop:start", started)
    pipe.execute()

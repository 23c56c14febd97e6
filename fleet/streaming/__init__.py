"""Token streaming: a model step's text from the run that writes it to the task's watchers.

``sink.RunDeltas`` is the runner's ``Deltas`` port: it numbers a run's deltas, redacts them as a
stream (``fleet.domain.stream_redaction``) and hands them to a channel. In a fleet the channel is
Redis (``redis.RedisChannel``): per task a bounded stream of recent deltas with a TTL, and a
message on the task's change-hint channel that the API's hint subscription passes to the task's
streams; the API reads the buffer (``redis.RedisBuffer``) when a stream joins mid-step or sees a
gap. Embedded, one process holds both ends (``local.LocalChannel``). Nothing of it touches the
store: the journaled step is the record, the deltas are its preview.
"""

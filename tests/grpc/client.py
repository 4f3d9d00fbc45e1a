#!/usr/bin/python3
"""A delayd.v1 client for the black-box tests (python3-grpcio).

    client.py PROTO_DIR ADDRESS SCENARIO [ARG...]

Generates its Python code from the shipped .proto files (as receiver.py
does), runs one scenario against delayd's gRPC listener at ADDRESS and
prints "ok" at the end; a failed check raises, naming it. The API token, if
any, is in the environment as DELAYD_TOKEN. Scenarios print what the C++
test checks beside them ("job 12 lease 1") on lines of their own.
"""
import base64
import json
import os
import queue
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from receiver import generate  # noqa: E402

PROTO_DIR, ADDRESS, SCENARIO = sys.argv[1], sys.argv[2], sys.argv[3]
ARGS = sys.argv[4:]
generate(PROTO_DIR, tempfile.mkdtemp(prefix="delayd-grpc-client-"))

import grpc  # noqa: E402
from google.protobuf import duration_pb2, timestamp_pb2  # noqa: E402
from delayd.v1 import errors_pb2, jobs_pb2, jobs_pb2_grpc  # noqa: E402
from delayd.v1 import timers_pb2, timers_pb2_grpc, topics_pb2, topics_pb2_grpc  # noqa: E402

channel = grpc.insecure_channel(ADDRESS)
jobs = jobs_pb2_grpc.JobsStub(channel)
topics = topics_pb2_grpc.TopicsStub(channel)
timers = timers_pb2_grpc.TimersStub(channel)
TOKEN = os.environ.get("DELAYD_TOKEN", "")


def md(token=None):
    token = TOKEN if token is None else token
    return [("authorization", "Bearer " + token)] if token else []


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def refused(call, code, field=None, contains=None):
    """Runs `call`, which must fail with `code` (and name `field`)."""
    try:
        call()
    except grpc.RpcError as e:
        check(e.code() == code, f"expected {code}, got {e.code()}: {e.details()}")
        if contains is not None:
            check(contains in e.details(), f"{contains!r} not in {e.details()!r}")
        if field is not None:
            details = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin")
            check(details is not None, "no grpc-status-details-bin")
            status = errors_pb2.Status.FromString(details)
            check(status.code == code.value[0], f"details code {status.code}")
            fields = []
            for any_ in status.details:
                if any_.type_url == "type.googleapis.com/google.rpc.BadRequest":
                    fields += [v.field for v in errors_pb2.BadRequest.FromString(any_.value).field_violations]
            check(fields == [field], f"field violations {fields}, expected [{field}]")
        return e
    raise AssertionError(f"expected {code}, the call succeeded")


def submit(topic, body=b"", **kw):
    return jobs.Submit(jobs_pb2.SubmitRequest(topic=topic, body=body, **kw), metadata=md())


def ms(d):
    return duration_pb2.Duration(seconds=d // 1000, nanos=(d % 1000) * 1_000_000)


ALL_BYTES = bytes(range(256))


def scenario_jobs():
    r = submit("orders", ALL_BYTES, key="order-8812", priority=7, ttr_ms=20_000)
    job = r.job
    check(not r.duplicate and job.id > 0, f"submit: {r}")
    check(job.body == ALL_BYTES and not job.body_is_json, "bytes come back byte for byte")
    check(job.state == jobs_pb2.JOB_STATE_READY and job.priority == 7 and job.ttr_ms == 20_000, str(job))
    check(job.key == "order-8812" and job.topic == "orders", str(job))
    got = jobs.Get(jobs_pb2.JobId(id=job.id), metadata=md())
    check(got.body == ALL_BYTES and got.id == job.id, "get")
    check(got.traceparent == "" and got.tracestate == "", "no trace context given, none kept")
    # W3C trace context as metadata, as HTTP takes it as headers.
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = jobs.Submit(jobs_pb2.SubmitRequest(topic="traced", body=b"t"),
                         metadata=md() + [("traceparent", tp), ("tracestate", "rojo=1, congo=2")]).job
    check(traced.traceparent == tp and traced.tracestate == "rojo=1,congo=2", f"trace context: {traced}")
    check(jobs.Get(jobs_pb2.JobId(id=traced.id), metadata=md()).traceparent == tp, "kept with the job")
    check(jobs.GetByKey(jobs_pb2.GetByKeyRequest(topic="orders", key="order-8812"), metadata=md()).id == job.id,
          "get by key")
    again = submit("orders", b"other", key="order-8812")
    check(again.duplicate and again.job.id == job.id and again.job.body == ALL_BYTES, "a key taken: duplicate")
    text = b'{"z": 1.50, "a": ["\\u00e9", null]}'
    j = submit("orders", text, body_is_json=True, delay=ms(3_600_000)).job
    check(j.body == text and j.body_is_json and j.state == jobs_pb2.JOB_STATE_DELAYED, f"json body {j.body!r}")
    check(j.due_at.seconds - time.time() > 3500, "delay")
    print(f"json job {j.id}", flush=True)

    batch = jobs.SubmitBatch(jobs_pb2.SubmitBatchRequest(topic="orders", jobs=[
        jobs_pb2.SubmitRequest(body=b"b%d" % i, key=f"batch-{i}") for i in range(3)]), metadata=md())
    check([b.job.body for b in batch.jobs] == [b"b0", b"b1", b"b2"], f"batch {batch}")
    check(len({b.job.id for b in batch.jobs}) == 3, "batch ids")

    listed = jobs.List(jobs_pb2.ListJobsRequest(topic="orders", state=jobs_pb2.JOB_STATE_READY, limit=2),
                       metadata=md())
    check(len(listed.jobs) == 2 and listed.next_cursor, f"list page 1 {listed}")
    rest = jobs.List(jobs_pb2.ListJobsRequest(topic="orders", state=jobs_pb2.JOB_STATE_READY, limit=10,
                                              cursor=listed.next_cursor), metadata=md())
    ids = [x.id for x in listed.jobs] + [x.id for x in rest.jobs]
    check(sorted(ids) == sorted([job.id] + [b.job.id for b in batch.jobs]), f"list {ids}")
    check(all(x.state == jobs_pb2.JOB_STATE_READY for x in rest.jobs), "list filter")
    check(not rest.next_cursor, "last page")
    prefixed = jobs.List(jobs_pb2.ListJobsRequest(key_prefix="batch-"), metadata=md())
    check(len(prefixed.jobs) == 3, "key prefix")

    up = jobs.Update(jobs_pb2.UpdateRequest(id=j.id, priority=3, body=b"\x00new", delay=ms(7_200_000)),
                     metadata=md())
    check(up.priority == 3 and up.body == b"\x00new" and not up.body_is_json, f"update {up}")
    check(up.due_at.seconds - time.time() > 7100, "update delay")
    now = jobs.RunNow(jobs_pb2.JobId(id=j.id), metadata=md())
    check(now.state == jobs_pb2.JOB_STATE_READY, "run now")
    buried = jobs.Bury(jobs_pb2.BuryRequest(id=j.id, priority=9), metadata=md())
    check(buried.state == jobs_pb2.JOB_STATE_BURIED and buried.priority == 9, f"bury {buried}")
    kicked = jobs.Kick(jobs_pb2.JobId(id=j.id), metadata=md())
    check(kicked.state == jobs_pb2.JOB_STATE_READY, "kick")
    refused(lambda: jobs.Retry(jobs_pb2.JobId(id=j.id), metadata=md()), grpc.StatusCode.FAILED_PRECONDITION)
    jobs.Bury(jobs_pb2.BuryRequest(id=j.id), metadata=md())
    retried = jobs.Retry(jobs_pb2.JobId(id=j.id), metadata=md())
    check(retried.state == jobs_pb2.JOB_STATE_READY, f"retry {retried}")
    check(len(jobs.Attempts(jobs_pb2.JobId(id=j.id), metadata=md()).attempts) == 0, "attempts")
    jobs.Cancel(jobs_pb2.JobId(id=j.id), metadata=md())
    refused(lambda: jobs.Get(jobs_pb2.JobId(id=j.id), metadata=md()), grpc.StatusCode.NOT_FOUND)
    refused(lambda: jobs.Kick(jobs_pb2.JobId(id=job.id), metadata=md()), grpc.StatusCode.FAILED_PRECONDITION)
    print(f"bytes job {job.id}", flush=True)


class Worker:
    """A Reserve stream whose requests are fed from a queue."""

    every = []  # each Worker made, closed before the client exits

    def __init__(self, topics, credit, token=None):
        Worker.every.append(self)
        self.requests = queue.Queue()
        self.requests.put(jobs_pb2.ReserveRequest(topics=topics, credit=credit))
        self.stream = jobs.Reserve(iter(self.requests.get, None), metadata=md(token))

    def more(self, credit):
        self.requests.put(jobs_pb2.ReserveRequest(credit=credit))

    def next(self):
        return next(self.stream).job

    def close(self):
        self.requests.put(None)


def scenario_reserve():
    ids = [submit("work", b"job-%d" % i, ttr_ms=60_000).job.id for i in range(3)]
    other = submit("other-work", b"other", ttr_ms=60_000).job.id
    w = Worker(["work", "other-work"], 2)
    a, b = w.next(), w.next()
    check({a.id, b.id} <= set(ids + [other]), "reserved ids")
    for x in (a, b):
        check(x.state == jobs_pb2.JOB_STATE_RESERVED and x.lease.lease > 0 and x.lease.holder == "consumer",
              f"lease {x}")
        check(x.body in (b"job-0", b"job-1", b"job-2", b"other"), "reserved body")
    touched = jobs.Touch(jobs_pb2.SettleRequest(id=a.id, lease=a.lease.lease), metadata=md())
    check(touched.lease.expires_at.seconds >= a.lease.expires_at.seconds, "touch")
    jobs.Finish(jobs_pb2.SettleRequest(id=a.id, lease=a.lease.lease), metadata=md())
    check(jobs.Get(jobs_pb2.JobId(id=a.id), metadata=md()).state == jobs_pb2.JOB_STATE_DONE, "finished")
    # Settled once: the lease is spent (NOT_FOUND, as HTTP's 404 and beanstalk's NOT_FOUND).
    refused(lambda: jobs.Finish(jobs_pb2.SettleRequest(id=a.id, lease=a.lease.lease), metadata=md()),
            grpc.StatusCode.NOT_FOUND)
    rel = jobs.Release(jobs_pb2.ReleaseRequest(id=b.id, lease=b.lease.lease, delay=ms(3_600_000), priority=1),
                       metadata=md())
    check(rel.state == jobs_pb2.JOB_STATE_DELAYED and rel.priority == 1, f"release {rel}")
    # No credit: nothing more comes until the worker asks.
    w.more(2)
    c, d = w.next(), w.next()
    check(len({a.id, b.id, c.id, d.id}) == 4, "each job once")
    buried = jobs.Bury(jobs_pb2.BuryRequest(id=c.id, lease=c.lease.lease), metadata=md())
    check(buried.state == jobs_pb2.JOB_STATE_BURIED, "bury with lease")
    jobs.Finish(jobs_pb2.SettleRequest(id=d.id, lease=d.lease.lease), metadata=md())
    # A job submitted while the worker waits reaches it.
    w.more(1)
    late = submit("work", b"late").job.id
    e = w.next()
    check(e.id == late and e.body == b"late", "a job submitted later arrives")
    w.close()
    try:
        next(w.stream)
        raise AssertionError("the stream should end when the worker stops asking")
    except StopIteration:
        pass
    refused(lambda: Worker([], 1).next(), grpc.StatusCode.INVALID_ARGUMENT, field="topics")
    refused(lambda: Worker(["work"], 5000).next(), grpc.StatusCode.INVALID_ARGUMENT, field="credit")


def scenario_errors():
    big = int(ARGS[0])  # the server's --max-request-bytes
    refused(lambda: submit("orders", b"x", ttr_ms=5), grpc.StatusCode.INVALID_ARGUMENT, field="ttr_ms")
    refused(lambda: submit("bad topic!", b"x"), grpc.StatusCode.INVALID_ARGUMENT)
    refused(lambda: submit("orders", b"{not json", body_is_json=True), grpc.StatusCode.INVALID_ARGUMENT,
            field="body")
    refused(lambda: submit("orders", b"[" * 100_000, body_is_json=True), grpc.StatusCode.INVALID_ARGUMENT,
            field="body")
    refused(lambda: submit("orders", b"x", run_at=timestamp_pb2.Timestamp(seconds=400_000_000_000)),
            grpc.StatusCode.INVALID_ARGUMENT, field="run_at")
    refused(lambda: submit("orders", b"x", delay=duration_pb2.Duration(seconds=-1)),
            grpc.StatusCode.INVALID_ARGUMENT, field="delay")
    refused(lambda: submit("orders", b"x", target=jobs_pb2.Target(url="ftp://example.com/")),
            grpc.StatusCode.INVALID_ARGUMENT, field="target.url")
    refused(lambda: jobs.List(jobs_pb2.ListJobsRequest(state=42), metadata=md()),
            grpc.StatusCode.INVALID_ARGUMENT, field="state")
    refused(lambda: jobs.SubmitBatch(jobs_pb2.SubmitBatchRequest(topic="orders", jobs=[
        jobs_pb2.SubmitRequest(body=b"1"), jobs_pb2.SubmitRequest(body=b"2", ttr_ms=1)]), metadata=md()),
        grpc.StatusCode.INVALID_ARGUMENT, field="jobs[1].ttr_ms")
    refused(lambda: jobs.SubmitBatch(jobs_pb2.SubmitBatchRequest(topic="orders", jobs=[
        jobs_pb2.SubmitRequest(topic="elsewhere")]), metadata=md()),
        grpc.StatusCode.INVALID_ARGUMENT, field="jobs[0].topic")
    refused(lambda: jobs.SubmitBatch(jobs_pb2.SubmitBatchRequest(topic="orders"), metadata=md()),
            grpc.StatusCode.INVALID_ARGUMENT, field="jobs")
    refused(lambda: jobs.Get(jobs_pb2.JobId(id=999_999), metadata=md()), grpc.StatusCode.NOT_FOUND)
    refused(lambda: jobs.Finish(jobs_pb2.SettleRequest(id=999_999, lease=1), metadata=md()),
            grpc.StatusCode.NOT_FOUND)
    # Larger than the job size limit, within the message limit.
    refused(lambda: submit("orders", b"x" * (big // 2)), grpc.StatusCode.INVALID_ARGUMENT, field="body")
    # Larger than any message may be: refused by gRPC before it is parsed.
    refused(lambda: submit("orders", b"x" * (big + 1)), grpc.StatusCode.RESOURCE_EXHAUSTED)
    # Bytes that are no SubmitRequest: gRPC C++ (1.51) refuses them before
    # delayd sees them, with UNIMPLEMENTED (its code for a request it cannot parse).
    raw = channel.unary_unary("/delayd.v1.Jobs/Submit", request_serializer=None, response_deserializer=None)
    refused(lambda: raw(b"\xff\xff\xff\xff\x0f", metadata=md()), grpc.StatusCode.UNIMPLEMENTED)
    refused(lambda: raw(b"\x0a\xff", metadata=md()), grpc.StatusCode.UNIMPLEMENTED)
    refused(lambda: submit("", b"x"), grpc.StatusCode.INVALID_ARGUMENT, field="topic")
    # An unknown method.
    missing = channel.unary_unary("/delayd.v1.Jobs/Explode", request_serializer=None, response_deserializer=None)
    refused(lambda: missing(b"", metadata=md()), grpc.StatusCode.UNIMPLEMENTED)
    for topic in ("orders",):
        listed = jobs.List(jobs_pb2.ListJobsRequest(topic=topic), metadata=md())
        check(len(listed.jobs) == 0, f"nothing refused was kept: {[(j.topic, j.body[:20]) for j in listed.jobs]}")
    # A deadline that passes in flight: the client cannot know whether the
    # job was kept (a call delayd takes up before the deadline may still
    # commit), as over HTTP; the key makes submitting again safe.
    # (Twenty times: the second submission often meets the first's commit.)
    ids = []
    for i in range(20):
        try:  # (now and then the call still makes it in time)
            jobs.Submit(jobs_pb2.SubmitRequest(topic="expired", key=f"exp-{i}", body=b"x"),
                        timeout=0.000001, metadata=md())
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, f"expired: {e.code()}")
        again = submit("expired", b"x", key=f"exp-{i}")
        check(again.job.key == f"exp-{i}" and again.job.body == b"x", f"resubmitted: {again}")
        ids.append(again.job.id)
    listed = jobs.List(jobs_pb2.ListJobsRequest(topic="expired", limit=100), metadata=md())
    check(sorted(j.id for j in listed.jobs) == sorted(ids), f"one job a key: {listed}")


def scenario_auth():
    admin, reader, writer = ARGS[0], ARGS[1], ARGS[2]
    refused(lambda: jobs.Get(jobs_pb2.JobId(id=1), metadata=md("")), grpc.StatusCode.UNAUTHENTICATED)
    refused(lambda: jobs.Get(jobs_pb2.JobId(id=1), metadata=md("wrong")), grpc.StatusCode.UNAUTHENTICATED)
    job = jobs.Submit(jobs_pb2.SubmitRequest(topic="auth", body=b"x"), metadata=md(admin)).job
    check(jobs.Get(jobs_pb2.JobId(id=job.id), metadata=md(reader)).id == job.id, "the read token reads")
    refused(lambda: jobs.Submit(jobs_pb2.SubmitRequest(topic="auth", body=b"y"), metadata=md(reader)),
            grpc.StatusCode.PERMISSION_DENIED)
    refused(lambda: jobs.Cancel(jobs_pb2.JobId(id=job.id), metadata=md(reader)), grpc.StatusCode.PERMISSION_DENIED)
    refused(lambda: Worker(["auth"], 1, token=reader).next(), grpc.StatusCode.PERMISSION_DENIED)
    refused(lambda: Worker(["auth"], 1, token="").next(), grpc.StatusCode.UNAUTHENTICATED)
    check(Worker(["auth"], 1, token=admin).next().id == job.id, "the API token reserves")
    # The write token submits and reserves, but a topic's pause is admin's.
    written = jobs.Submit(jobs_pb2.SubmitRequest(topic="auth-w", body=b"w"), metadata=md(writer)).job
    check(Worker(["auth-w"], 1, token=writer).next().id == written.id, "the write token reserves")
    refused(lambda: topics.Pause(topics_pb2.TopicName(name="auth-w"), metadata=md(writer)),
            grpc.StatusCode.PERMISSION_DENIED, contains="admin")
    check(topics.Pause(topics_pb2.TopicName(name="auth-w"), metadata=md(admin)).settings.paused, "admin pauses")


def scenario_health():
    check_rpc = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None,
                                    response_deserializer=None)
    check(check_rpc(b"") == b"\x08\x01", "health: SERVING")
    info = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                 request_serializer=None, response_deserializer=None)
    answer = next(info(iter([b"\x3a\x00"])))  # list_services: ""
    for name in (b"delayd.v1.Jobs", b"delayd.v1.Topics", b"delayd.v1.Timers", b"grpc.health.v1.Health"):
        check(name in answer, f"reflection lists {name}")


def scenario_topics_timers():
    t = topics.Put(topics_pb2.PutTopicRequest(name="billing", settings=topics_pb2.TopicSettings(
        ttr_ms=45_000, retry=jobs_pb2.RetryPolicy(max_attempts=4), signing_secret="s3cret",
        rate_limit_per_s=50)), metadata=md())
    check(t.name == "billing" and t.settings.ttr_ms == 45_000 and t.settings.retry.max_attempts == 4, str(t))
    check(t.signing_secret_set and not t.settings.signing_secret, "the secret is write-only")
    check(t.settings.rate_limit_per_s == 50, "rate limit")
    submit("billing", b"x")
    got = topics.Get(topics_pb2.TopicName(name="billing"), metadata=md())
    check(got.counts.ready == 1 and got.counts.total_jobs == 1, f"counts {got.counts}")
    check("billing" in [x.name for x in topics.List(topics_pb2.ListTopicsRequest(), metadata=md()).topics], "list")
    check(topics.Pause(topics_pb2.TopicName(name="billing"), metadata=md()).settings.paused, "pause")
    check(not topics.Resume(topics_pb2.TopicName(name="billing"), metadata=md()).settings.paused, "resume")
    stats = topics.Stats(topics_pb2.StatsRequest(), metadata=md())
    check(stats.fields["jobs"].struct_value.fields["ready"].number_value >= 1, f"stats {stats}")

    body = b'{"rank": "daily",  "n": 1.0}'
    timer = timers.Create(timers_pb2.Timer(
        name="ranking", topic="billing", schedule="0 9 * * *", timezone="Asia/Shanghai",
        template=timers_pb2.TimerTemplate(body=body, body_is_json=True, priority=3)), metadata=md())
    check(timer.id > 0 and timer.active and timer.template.body == body, f"timer {timer}")
    check(timer.next_fire_at.seconds % 86_400 == 3600, "09:00 in Shanghai is 01:00 UTC")
    check(timers.Get(timers_pb2.TimerId(id=timer.id), metadata=md()).name == "ranking", "get timer")
    check([x.id for x in timers.List(timers_pb2.ListTimersRequest(), metadata=md()).timers] == [timer.id], "list")
    nxt = timers.Next(timers_pb2.NextFiresRequest(id=timer.id, count=3), metadata=md())
    check(len(nxt.fire_times) == 3 and nxt.fire_times[1].seconds - nxt.fire_times[0].seconds == 86_400, "next")
    pv = timers.Preview(timers_pb2.PreviewRequest(timer=timers_pb2.Timer(schedule="@every 90s"), count=2),
                        metadata=md())
    check(len(pv.fire_times) == 2 and pv.fire_times[1].seconds - pv.fire_times[0].seconds == 90, f"preview {pv}")
    up = timers.Update(timers_pb2.UpdateTimerRequest(id=timer.id, timer=timers_pb2.Timer(
        schedule="30 9 * * *", name="ignored"), fields=["schedule"]), metadata=md())
    check(up.schedule == "30 9 * * *" and up.name == "ranking", f"update {up}")
    refused(lambda: timers.Update(timers_pb2.UpdateTimerRequest(id=timer.id, timer=timers_pb2.Timer(
        schedule="61 * * * *"), fields=["schedule"]), metadata=md()), grpc.StatusCode.INVALID_ARGUMENT,
        field="timer.schedule")
    check(not timers.Pause(timers_pb2.TimerId(id=timer.id), metadata=md()).active, "pause timer")
    check(timers.Resume(timers_pb2.TimerId(id=timer.id), metadata=md()).active, "resume timer")
    check(timers.Fires(timers_pb2.FiresRequest(id=timer.id), metadata=md()).timer_id == timer.id, "fires")
    timers.Delete(timers_pb2.TimerId(id=timer.id), metadata=md())
    refused(lambda: timers.Get(timers_pb2.TimerId(id=timer.id), metadata=md()), grpc.StatusCode.NOT_FOUND)


def scenario_hold():
    """Reserves one job of ARGS[0] over a stream, says which, and holds it."""
    w = Worker([ARGS[0]], 1)
    try:
        job = w.next()
        print(f"reserved {job.id} lease {job.lease.lease}", flush=True)
        w.next()
    except grpc.RpcError as e:
        print(f"stream ended {e.code().name}", flush=True)


def scenario_take():
    """Reserves one job of ARGS[0], finishes it and says which."""
    w = Worker([ARGS[0]], 1)
    job = w.next()
    jobs.Finish(jobs_pb2.SettleRequest(id=job.id, lease=job.lease.lease), metadata=md())
    print(f"finished {job.id} body {base64.b64encode(job.body).decode()}", flush=True)
    w.close()


globals()["scenario_" + SCENARIO.replace("-", "_")]()
# Every stream's request thread ends and the channel closes before Python
# finalizes: a gRPC thread still blocked then can die holding a call's lock,
# and the channel's finalizer then waits on that lock forever (a client that
# printed "ok" and hung until its timeout, once in a TSan run).
for w in Worker.every:
    w.close()
channel.close()
print("ok", flush=True)

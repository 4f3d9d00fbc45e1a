#!/usr/bin/python3
# Times the requests the web console makes, against a delayd at PORT:
#   bench/console_latency.py PORT [RUNS]
#   FORECASTS=1 bench/console_latency.py PORT [RUNS]   the forecasts only
# Each request RUNS times (default 20) on a fresh connection, as the browser
# would after idling; prints one line per request: p50, p95 and max in ms,
# and the first request's time (the hour and day forecasts are read once,
# then served from their cache while it is refreshed aside).
import json
import os
import statistics
import sys
import time
import urllib.parse
import urllib.request

port = int(sys.argv[1])
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
base = f"http://127.0.0.1:{port}"


def get(path):
    with urllib.request.urlopen(base + path, timeout=120) as r:
        return r.read()


def time_ms(path):
    t = time.perf_counter()
    get(path)
    return (time.perf_counter() - t) * 1000


first = json.loads(get("/v1/jobs?limit=1"))["jobs"][0]["id"]
stats = json.loads(get("/v1/stats"))
total = stats["jobs"]["delayed"] + stats["jobs"]["ready"] + stats["jobs"]["buried"]
middle = first + total // 2
now = time.time()
iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
q = urllib.parse.quote
requests = [
    ("overview: /v1/stats", "/v1/stats"),
    ("overview: /v1/topics", "/v1/topics"),
    ("overview: /metrics", "/metrics"),
    ("overview: forecast per minute", "/v1/forecast?bucket=minute"),
    ("overview: forecast per hour", "/v1/forecast?bucket=hour"),
    ("overview: forecast per day (30 days)", "/v1/forecast?bucket=day"),
    ("jobs: first page", "/v1/jobs?limit=50"),
    ("jobs: a page in the middle (cursor)", f"/v1/jobs?limit=50&cursor={middle}"),
    ("jobs: topic and state", "/v1/jobs?limit=50&topic=orders&state=delayed"),
    ("jobs: key prefix", "/v1/jobs?limit=50&topic=orders&key_prefix=order-4242"),
    ("jobs: by key", f"/v1/topics/orders/keys/order-{total // 3}"),
    ("jobs: due within an hour, 10 days out",
     f"/v1/jobs?limit=50&due_after={iso(now + 864000)}&due_before={iso(now + 867600)}"),
    ("jobs: error text (the dead letters among all)",
     f"/v1/jobs?limit=50&error={q('Could not resolve')}"),
    ("jobs: body field (reads its budget, 65,536 jobs)",
     f"/v1/jobs?limit=50&topic=orders&body_field=order&body_value={total // 3}"),
    ("jobs: body field, from a cursor before the match",
     f"/v1/jobs?limit=50&topic=orders&body_field=order&body_value={total // 3}"
     f"&cursor={first + total // 3 - 100}"),
    ("job: one job", f"/v1/jobs/{middle}"),
    ("job: its attempts", f"/v1/jobs/{middle}/attempts"),
    ("dead letters: groups by error", "/v1/dead-letters?limit=100"),
    ("dead letters: state=buried, 200", "/v1/jobs?state=buried&limit=200"),
    ("dead letters: state=buried and error", f"/v1/jobs?state=buried&limit=200&error={q('resolve')}"),
]
if os.environ.get("FORECASTS"):  # after a restart: the overview's forecasts only
    requests = [r for r in requests if "forecast" in r[1]]
print(f"{total} jobs in the store; {runs} runs of each request")
for name, path in requests:
    times = [time_ms(path) for _ in range(runs)]
    ms = sorted(times)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    print(f"{name:50s} p50 {statistics.median(ms):8.1f}  p95 {p95:8.1f}  max {ms[-1]:8.1f} ms"
          f"  (first {times[0]:.1f}){'' if p95 < 200 else '   OVER 200 ms'}")

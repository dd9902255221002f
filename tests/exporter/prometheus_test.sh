#!/usr/bin/env bash
# gmem exporter against the real thing: Debian's prometheus server scrapes gmem-exporter on
# loopback while two services run under `gmem run` on the fake driver (no GPU): one leaks 64 KiB
# every 100 ms at leak_slowly(), one holds 4 MiB at hold_stable() and replaces it every 100 ms.
# Through Prometheus's HTTP query API: the series exist with the right values, the leaking
# site's growth is positive and the stable site's is zero. Also: promtool checks the shipped
# alerting rules and the exposition (`promtool check metrics`), the Grafana dashboard is valid
# JSON that queries existing metrics, and the exporter survives its processes vanishing. Skips
# (77) only when prometheus or prometheus-cpp is not installed. Everything it starts is stopped
# on exit; bounded to about a minute.
set -u
source "$(dirname "$0")/serving_port.sh"
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
SVC=$B/tests/exporter/steady_service
for f in "$GMEM" "$SVC" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "skip: Debian's prometheus is not installed (scripts/install-deps.sh test installs it)"
  exit 77
fi
if [ ! -x "$B/bin/gmem-exporter" ]; then
  echo "skip: gmem-exporter was not built (prometheus-cpp-dev missing; scripts/install-deps.sh)"
  exit 77
fi
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
JOBS=()
NB= # the copy of the build uid 65534 runs (tests/second_uid.sh)
before_cleanup() {
  touch "$W/stop"
  for p in "${JOBS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${JOBS[@]}"; do wait "$p" 2>/dev/null; done
  [ -z "$NB" ] || rm -rf "$NB"
}
source "$(dirname "$0")/../traced_runs.sh"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== rules and dashboard"
promtool check rules docs/monitoring/gmem-alerts.yml || fail "promtool check rules"
python3 - docs/monitoring/gmem-dashboard.json <<'PY' || fail "dashboard"
import json, re, sys
d = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
assert exprs, "no queries"
names = set(re.findall(r"\bgmem_[a-z_]+", " ".join(exprs)))
known = set(open("tools/prometheus/fleet_metrics.cpp").read().split('"'))
missing = sorted(n for n in names if n not in known)
assert not missing, f"dashboard queries unknown metrics: {missing}"
print(f"dashboard: {len(d['panels'])} panels, {len(exprs)} queries over {len(names)} metrics")
PY

echo "== services under gmem run"
start_service() { # mode: starts it, sets SVC_PID once it printed "ready" (no subshell: JOBS)
  "$GMEM" run -- "$SVC" "$1" "$W/stop" >"$W/$1.out" 2>"$W/$1.err" &
  JOBS+=($!)
  for _ in $(seq 100); do
    grep -q '^ready' "$W/$1.out" 2>/dev/null && break
    sleep 0.1
  done
  SVC_PID=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/$1.out")
}
start_service leak
LEAK=$SVC_PID
start_service stable
STABLE=$SVC_PID
[ -n "$LEAK" ] && [ -n "$STABLE" ] || { fail "services did not start"; cat "$W"/*.err; exit 1; }
PIDS+=("$LEAK" "$STABLE")
echo "leak pid $LEAK, stable pid $STABLE"

echo "== gmem exporter"
"$GMEM" exporter --listen 127.0.0.1:0 --growth-window 3s --keep-exited 1m --command-line \
  2>"$W/exporter.err" &
JOBS+=($!)
EPORT=$(serving_port "$W/exporter.err")
[ -n "$EPORT" ] || { fail "exporter did not start"; cat "$W/exporter.err"; exit 1; }
curl -sf "http://127.0.0.1:$EPORT/metrics" >"$W/metrics.txt" || fail "exporter scrape"
grep -q "gmem_live_bytes{pid=\"$LEAK\"" "$W/metrics.txt" || fail "no gmem_live_bytes for $LEAK"
promtool check metrics <"$W/metrics.txt" >"$W/promtool.txt" 2>&1 ||
  fail "promtool check metrics: $(head -5 "$W/promtool.txt")"
grep -q "gmem_live_bytes{pid=\"$LEAK\",uid=\"$(id -u)\",user=\"$(id -un)\",exe=\"steady_service\"" \
  "$W/metrics.txt" || fail "labels pid, uid, user, exe: $(grep -m1 "gmem_live_bytes{pid=\"$LEAK\"" "$W/metrics.txt")"

echo "== prometheus"
PPORT=$(free_port)
cat >"$W/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["$PWD/docs/monitoring/gmem-alerts.yml"]
scrape_configs:
  - job_name: gmem
    static_configs:
      - targets: ["127.0.0.1:$EPORT"]
YML
prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/data" \
  --web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$W/prometheus.log" 2>&1 &
JOBS+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null || { fail "prometheus not ready"; tail "$W/prometheus.log"; exit 1; }

# Polls the query API until every check holds (at most 40 s): the growth window is 3 s, so
# the stable site's growth is exactly 0 once both services have run longer than that.
python3 - "$PPORT" "$LEAK" "$STABLE" <<'PY' || fail "queries through Prometheus"
import json, sys, time, urllib.parse, urllib.request
port, leak, stable = sys.argv[1:4]
def q(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    d = json.load(urllib.request.urlopen(url, timeout=5))
    assert d["status"] == "success", d
    return d["data"]["result"]
def checks():
    errs = []
    up = q('up{job="gmem"}')
    if not up or up[0]["value"][1] != "1": errs.append(f"up: {up}")
    r = q(f'gmem_process_running{{pid="{leak}"}}')
    if not r or r[0]["value"][1] != "1": errs.append(f"leak not running: {r}")
    lk = q(f'gmem_site_growth_bytes{{pid="{leak}",caller=~".*leak_slowly.*"}}')
    if len(lk) != 1 or float(lk[0]["value"][1]) <= 0: errs.append(f"leak growth: {lk}")
    model = q(f'gmem_site_growth_bytes{{pid="{leak}",caller=~".*hold_model.*"}}')
    if len(model) != 1 or float(model[0]["value"][1]) != 0: errs.append(f"model growth: {model}")
    st = q(f'gmem_site_growth_bytes{{pid="{stable}",caller=~".*hold_stable.*"}}')
    if len(st) != 1 or float(st[0]["value"][1]) != 0: errs.append(f"stable growth: {st}")
    sl = q(f'gmem_site_live_bytes{{pid="{stable}",caller=~".*hold_stable.*"}}')
    if len(sl) != 1 or float(sl[0]["value"][1]) != 4 << 20: errs.append(f"stable live: {sl}")
    ll = q(f'gmem_site_live_bytes{{pid="{leak}",caller=~".*leak_slowly.*"}}')
    if len(ll) != 1 or float(ll[0]["value"][1]) % (64 << 10) != 0 or float(ll[0]["value"][1]) < 64 << 10:
        errs.append(f"leak live: {ll}")
    lr = q(f'gmem_live_requested_bytes{{pid="{stable}",device="0"}}')
    if len(lr) != 1 or float(lr[0]["value"][1]) != 4 << 20: errs.append(f"stable pool live: {lr}")
    a = q(f'gmem_allocations_total{{pid="{stable}"}}')
    if len(a) != 1 or float(a[0]["value"][1]) < 20: errs.append(f"stable allocations: {a}")
    labels = lk[0]["metric"] if lk else {}
    for k in ("pid", "uid", "user", "exe", "command", "start_time", "site", "frame", "caller"):
        if k not in labels: errs.append(f"label {k} missing: {labels}")
    if labels and ("steady_service" not in labels.get("command", "") or len(labels.get("site", "")) != 12):
        errs.append(f"labels: {labels}")
    return errs
deadline = time.time() + 40
while True:
    errs = checks()
    if not errs: break
    if time.time() > deadline:
        print("\n".join(errs)); sys.exit(1)
    time.sleep(1)
lk = q(f'gmem_site_growth_bytes{{pid="{leak}",caller=~".*leak_slowly.*"}}')[0]
print(f"prometheus: leak site {lk['metric']['site']} grew {lk['value'][1]} B over 3 s; stable site 0 B")
# Growth of a steady 64 KiB / 100 ms leak over a 3 s window: about 30 allocations.
g = float(lk["value"][1]) / (64 << 10)
assert 15 <= g <= 40, f"leak growth {g} allocations over 3 s, expected about 30"
PY

echo "== another user's exporter refuses root's traces"
skipped=""
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
  skipped="another user's exporter (needs root and setpriv)"
  echo "skip: $skipped"
else
  NB=$(mktemp -d /tmp/gmem_nobody_XXXXXX)
  source "$(dirname "$0")/../second_uid.sh"
  NBUILD=$(reachable_build "$B" "$NB") || { fail "no copy of the build that uid 65534 can run"; exit 1; }
  setpriv --reuid=65534 --regid=65534 --clear-groups "$NBUILD/bin/gmem-exporter" --listen 127.0.0.1:0 \
    2>"$W/nobody.err" &
  JOBS+=($!)
  NPORT=$(serving_port "$W/nobody.err")
  if [ -n "$NPORT" ]; then
    curl -sf "http://127.0.0.1:$NPORT/metrics" >"$W/nobody.txt" || fail "nobody's exporter scrape"
    grep -q "pid=\"$LEAK\"" "$W/nobody.txt" && fail "nobody's exporter exported root's trace"
    grep -Eq '^gmem_exporter_traces\{outcome="unreadable"\} [1-9]' "$W/nobody.txt" ||
      fail "unreadable traces not counted"
    grep -q "only this user's traces" "$W/nobody.err" || fail "no warning when not root"
  else
    fail "gmem-exporter did not start as uid 65534: $(cat "$W/nobody.err")"
  fi
fi

echo "== processes vanish"
touch "$W/stop"
for p in "${JOBS[@]:0:2}"; do timeout 10 tail --pid="$p" -f /dev/null; done
curl -sf "http://127.0.0.1:$EPORT/metrics" >"$W/after.txt" || fail "scrape after exit"
grep -q "gmem_process_info{pid=\"$LEAK\".*state=\"exited\"" "$W/after.txt" || fail "exited process not kept"
"$GMEM" clean --force "$LEAK" >/dev/null 2>&1
"$GMEM" clean --force "$STABLE" >/dev/null 2>&1
curl -sf "http://127.0.0.1:$EPORT/metrics" >"$W/cleaned.txt" || fail "scrape after clean"
grep -q "pid=\"$LEAK\"" "$W/cleaned.txt" && fail "a removed trace is still exported"
grep -q '^gmem_exporter_scrapes_total' "$W/cleaned.txt" || fail "exporter health series"
kill -0 "${JOBS[2]}" 2>/dev/null || fail "exporter died"

[ $failures -eq 0 ] || exit 1
# A check that could not run makes the whole test a skip (77), not a pass.
[ -z "$skipped" ] || { echo "skipped: $skipped"; exit 77; }
echo "prometheus_test: all passed"

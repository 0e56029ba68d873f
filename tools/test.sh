#!/usr/bin/env bash
# Runs every test of tidepool, installing first what the tests need on a bare Debian machine:
# redis-server (differential tests; redis-cli and redis-benchmark for the RESP listener), curl
# (the README's commands), openssl, the official SDKs, and chromium with its driver and Selenium
# (the web console's browser tests).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1 \
   || ! command -v openssl >/dev/null 2>&1; then
  echo "== installing redis-server (with redis-cli and redis-benchmark), curl (the README's commands are run as written) and openssl (a test's TLS certificate)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server curl openssl >/dev/null
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "== installing chromium and chromium-driver (the web console's browser tests; Selenium drives Debian's driver, nothing is downloaded)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if ! python3 -c "import upstash_redis, qstash, pytest, prometheus_client, redis, selenium" >/dev/null 2>&1; then
  echo "== installing upstash-redis, qstash, pytest, prometheus-client (its OpenMetrics parser checks /metrics), redis (redis-py, for the RESP listener) and selenium (the console's browser tests)"
  python3 -m pip install -q --disable-pip-version-check "upstash-redis==1.8.0" "qstash==3.4.0" pytest "prometheus-client==0.21.1" "redis==6.4.0" "selenium==4.27.1"
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "== installing nodejs and npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nodejs npm >/dev/null
fi
echo "== installing the Node SDKs for the workflow test (tests/node/package-lock.json)"
(cd tests/node && npm ci --no-audit --no-fund --loglevel=error)

# The cluster's fault schedules (tests/it/cluster_faults.rs) take their seeds from here: a new
# one each run, printed so that a failure can be run again.
export TIDEPOOL_FAULT_SEED="${TIDEPOOL_FAULT_SEED:-$(date +%s)}"
echo "== cargo test (unit, golden bytes, HTTP, CLI, crash, cluster faults, differential vs redis-server)"
echo "   the cluster's fault schedules start at seed $TIDEPOOL_FAULT_SEED (TIDEPOOL_FAULT_SEED=$TIDEPOOL_FAULT_SEED runs the same ones again)"
cargo test --locked --all-targets --features fault-injection

# The SDK tests run the server binary that cargo test just built (target/debug/tidepool). It has
# the fault-injection feature, whose points do nothing unless a TIDEPOOL_FAULT_* variable is set;
# these tests set none. A second `cargo build` without the feature would compile the crate and
# part of its dependencies once more, for minutes and gigabytes, to test the same code.
test -x target/debug/tidepool

echo "== the official Python SDKs (upstash-redis, qstash), redis-py over RESP, and the web console in chromium, against tidepool"
TIDEPOOL_BIN="$PWD/target/debug/tidepool" python3 -m pytest -q tests/python

# Two releases of the workflow SDK are in use: the newest 1.x, and 0.2.x (package.json).
echo "== the official @upstash/workflow SDK (1.x) running workflows end to end against tidepool"
TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/workflow.mjs
echo "== the same with @upstash/workflow 0.2.x"
WORKFLOW_SDK=upstash-workflow-0-2 TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/workflow.mjs

echo "== @upstash/ratelimit on the official @upstash/redis (Lua scripts by EVALSHA) against tidepool"
TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/ratelimit.mjs

echo "== the official @upstash/redis JSON commands (redis.json.*) against tidepool"
TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/json.mjs

echo "== the official @upstash/redis where the hosted service answers differently from Redis"
TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/hosted.mjs

echo "== the @upstash/redis suite's own cases where the hosted service differs from Redis"
TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/sdk_hosted_cases.mjs

# The same SDK suites through a follower of a three-node cluster (TIDEPOOL_CLUSTER=follower:
# the fixtures start three nodes and hand the SDKs a follower's URL, which forwards writes to
# the leader and answers reads itself; a RESP connection's transaction, WATCH or blocking pop
# moves it to the leader, docs/replication.md).
echo "== the SDK suites again, through a follower of a three-node cluster"
TIDEPOOL_CLUSTER=follower TIDEPOOL_BIN="$PWD/target/debug/tidepool" python3 -m pytest -q \
  tests/python/test_upstash_redis.py tests/python/test_qstash.py tests/python/test_sdk_hosted_cases.py \
  tests/python/test_redis_py.py tests/python/test_redis_py_tls.py
for t in workflow hosted json ratelimit sdk_hosted_cases; do
  TIDEPOOL_CLUSTER=follower TIDEPOOL_BIN="$PWD/target/debug/tidepool" node "tests/node/$t.mjs"
done
TIDEPOOL_CLUSTER=follower WORKFLOW_SDK=upstash-workflow-0-2 TIDEPOOL_BIN="$PWD/target/debug/tidepool" node tests/node/workflow.mjs

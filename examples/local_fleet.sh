# A throwaway fleet on this machine, for the examples of docs/operations.md that talk to one
# ("Start runs from another service"). Source it from the repository root, in bash:
#
#     . examples/local_fleet.sh
#
# It starts what "A fleet on one machine, without Docker" starts, less Flower: Redis through
# storage/redis-start.sh (its ACL: user `little` with a password made here, the default user
# off), SeaweedFS's `weed mini` for S3, one `little worker` for every role serving
# examples.support_triage, and the scheduler; every port free, every file in one temporary
# directory. It exports the fleet's settings (LITTLE_BROKER_URL: the URL a sender uses,
# `redis://little:PASSWORD@127.0.0.1:PORT/0`) and stops the fleet and removes its files
# when the shell that sourced it exits. Needs the package's virtual environment on PATH
# (`little`, `weed`, `python3` with redis and boto3) and `redis-server`.

FLEET_DIR="$(mktemp -d)"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {                             # wait_for SECONDS COMMAND...: until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "gave up waiting for: $*" >&2; return 1; fi
    sleep 0.5
  done
}
stop_fleet() {
  kill $FLEET_PIDS 2>/dev/null || true
  wait $FLEET_PIDS 2>/dev/null || true
  kill $STORAGE_PIDS 2>/dev/null || true
  wait $STORAGE_PIDS 2>/dev/null || true
  rm -rf "$FLEET_DIR"
}
trap stop_fleet EXIT
REDIS_PORT="$(free_port)" S3_PORT="$(free_port)"

export LITTLE_REDIS_PASSWORD="$(python3 -c 'import secrets; print(secrets.token_hex(24))')"
export AWS_ACCESS_KEY_ID=little AWS_SECRET_ACCESS_KEY="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export LITTLE_REDIS_URL="redis://little:$LITTLE_REDIS_PASSWORD@127.0.0.1:$REDIS_PORT/0"
export LITTLE_BROKER_URL="$LITTLE_REDIS_URL" LITTLE_WORLD="$LITTLE_REDIS_URL"
export LITTLE_S3_ENDPOINT="http://127.0.0.1:$S3_PORT" LITTLE_S3_BUCKET=little LITTLE_S3_REGION=us-east-1
export LITTLE_APP=examples.support_triage
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

sed '/^dir /d' storage/redis.conf > "$FLEET_DIR/redis.conf"
LITTLE_REDIS_CONF="$FLEET_DIR/redis.conf" LITTLE_REDIS_ACL="$FLEET_DIR/users.acl" \
  storage/redis-start.sh --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$FLEET_DIR" \
  > "$FLEET_DIR/redis.log" 2>&1 &
STORAGE_PIDS="$!"
weed -logdir="$FLEET_DIR" mini -dir="$FLEET_DIR/s3" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
  -bucket="$LITTLE_S3_BUCKET" -s3.port="$S3_PORT" -s3.port.grpc="$(free_port)" \
  -s3.port.iceberg=0 -s3.port.lance=0 \
  -master.port="$(free_port)" -master.port.grpc="$(free_port)" \
  -volume.port="$(free_port)" -volume.port.grpc="$(free_port)" \
  -filer.port="$(free_port)" -filer.port.grpc="$(free_port)" \
  -admin.port="$(free_port)" -admin.port.grpc="$(free_port)" \
  -webdav=false -master.telemetry=false > "$FLEET_DIR/s3.log" 2>&1 &
STORAGE_PIDS="$STORAGE_PIDS $!"
wait_for 30 python3 -c 'import os, redis; redis.Redis.from_url(os.environ["LITTLE_REDIS_URL"]).ping()'
wait_for 60 python3 -c 'import os, boto3; boto3.client("s3", endpoint_url=os.environ["LITTLE_S3_ENDPOINT"], region_name="us-east-1").head_bucket(Bucket=os.environ["LITTLE_S3_BUCKET"])'

little worker --roles planner,orchestrator,worker,fixer --app "$LITTLE_APP" \
  > "$FLEET_DIR/worker.log" 2>&1 &
FLEET_PIDS="$!"
little scheduler > "$FLEET_DIR/scheduler.log" 2>&1 &
FLEET_PIDS="$FLEET_PIDS $!"
wait_for 120 grep -q "ready\." "$FLEET_DIR/worker.log"

#!/usr/bin/env bash
# Remote data throughput: images/s from a local S3 API (moto's server) vs local disk,
# for an image folder, a packed file and tar shards made from the same photos; then
# the io_depth sweep with STOKER_THROTTLE_MS=20 (object_store's ThrottledStore adds
# 20 ms to every GET) against the same runs without the delay.
#
#   bash benches/remote.sh /tmp/photos [OUT.md]
#
# Needs target/release/stoker-load (or $STOKER_LOAD) and moto_server ($STOKER_MOTO_SERVER,
# default the test venv's: bash scripts/py-venv.sh). Prints markdown tables.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: remote.sh PHOTO_FOLDER}
bin=${STOKER_LOAD:-target/release/stoker-load}
moto=${STOKER_MOTO_SERVER:-target/py-venv/bin/moto_server}
transform=${TRANSFORM:-rrc:224,flip}
epochs=${EPOCHS:-2}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$moto" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
curl -s -X PUT "http://127.0.0.1:$port/bench" >/dev/null

export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench \
  AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true

"$bin" pack "$data" "$work/photos.pack" >/dev/null
"$bin" pack "$data" "$work/shards" --format tar --shard-size 8M >/dev/null
"$bin" upload "$data" s3://bench/folder >/dev/null
"$bin" upload "$work/photos.pack" s3://bench/photos.pack >/dev/null
"$bin" upload "$work/shards" s3://bench/shards >/dev/null

# images/s of one run: bench DATA [extra flags...]
rate() {
  "$bin" bench "$1" --json --epochs "$epochs" --batch-size 64 --workers 2 --transform "$transform" "${@:2}" \
    | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["images_per_sec"]))'
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| data | local disk img/s | local S3 img/s (io_depth 64) | S3 / disk |"
echo "|---|---|---|---|"
for kind in folder packed tar; do
  case $kind in
    folder) local_path=$data; url=s3://bench/folder ;;
    packed) local_path=$work/photos.pack; url=s3://bench/photos.pack ;;
    tar) local_path=$work/shards; url=s3://bench/shards ;;
  esac
  l=$(rate "$local_path" --io-depth 64)
  r=$(rate "$url" --io-depth 64)
  echo "| $kind | $l | $r | $(python3 -c "print(f'{$r/$l:.2f}')") |"
done
c=$(rate s3://bench/shards --io-depth 64 --cache "$work/cache")
echo "| tar, --cache (epoch 1 fetches, later epochs local) | | $c | |"
echo
echo "io_depth sweep, local S3, 20 ms added to every GET (STOKER_THROTTLE_MS=20) vs none:"
echo
echo "| data | io_depth | no delay img/s | 20 ms delay img/s | delayed / none |"
echo "|---|---|---|---|---|"
for kind in folder packed tar; do
  case $kind in
    folder) url=s3://bench/folder ;;
    packed) url=s3://bench/photos.pack ;;
    tar) url=s3://bench/shards ;;
  esac
  for depth in 1 4 16 64; do
    a=$(rate "$url" --io-depth "$depth")
    b=$(STOKER_THROTTLE_MS=20 rate "$url" --io-depth "$depth")
    echo "| $kind | $depth | $a | $b | $(python3 -c "print(f'{$b/$a:.2f}')") |"
  done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

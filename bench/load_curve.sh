#!/bin/bash
# usage: GEN=DIR RELAY=DIR bench/load_curve.sh N [extra blink load args]
# Mosquitto on a free port + `blink serve --broker` (journal on) run from RELAY (default: this tree)
# + `blink load --json` run from GEN (default: this tree), both with this tree's .venv. Prints the
# load's JSON on stdout; on stderr "rc=.. load=.. mosquitto_cpu_pct=.." (Mosquitto's CPU over the
# whole `blink load`, set-up included). DUR (default 20) is the measured window.
HERE=$(cd "$(dirname "$0")/.." && pwd)
N=$1; shift
B=${B:-$HERE/.venv/bin}
GEN=${GEN:-$HERE}
RELAY=${RELAY:-$HERE}
PORT=$($B/python -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
D=$(mktemp -d /tmp/blink-curve.XXXX)
cat > $D/m.conf <<C
listener $PORT 127.0.0.1
allow_anonymous true
persistence false
set_tcp_nodelay true
max_queued_messages 10000
C
/usr/sbin/mosquitto -c $D/m.conf >$D/mosq.log 2>&1 & MP=$!
sleep 0.5
(cd "$RELAY" && exec $B/python -m client.cli --prefix c10/v1 serve --broker mqtt://127.0.0.1:$PORT --data $D/data) >$D/relay.log 2>&1 & RP=$!
sleep 2
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
C0=$(cpu $MP); T0=$(date +%s.%N)
(cd "$GEN" && exec $B/python -m client.cli --prefix c10/v1 load --server mqtt://127.0.0.1:$PORT --relay-pid $RP \
  --matches $N --duration ${DUR:-20} --json "$@") 2>$D/load.err
RC=$?; C1=$(cpu $MP); T1=$(date +%s.%N)
echo "rc=$RC load=$(cut -d' ' -f1 /proc/loadavg) mosquitto_cpu_pct=$(awk -v c=$((C1-C0)) -v t0=$T0 -v t1=$T1 -v hz=$(getconf CLK_TCK) 'BEGIN{printf "%.1f", c/hz/(t1-t0)*100}')" >&2
kill -INT $RP; wait $RP; kill $MP; wait $MP
rm -rf $D

#!/usr/bin/env bash
# Makes a demo PKI for txscore's two ports with the openssl command: a CA, the server's
# certificate, and four client certificates. For the demo and tests only: a real deployment's
# certificates come from its own CA (and its keys from an HSM or a secrets store).
#
#   scripts/make-demo-pki.sh [DIR]      (default: var/pki; existing, still valid files are kept)
#   scripts/make-demo-pki.sh --force DIR (make everything anew)
#
# DIR/ca.crt, DIR/ca.key      the demo CA (EC P-256, 2 years)
# DIR/server/                 tls.crt, tls.key: CN txscore-server, SAN DNS:localhost, DNS:<hostname>,
#                             IP:127.0.0.1, IP:::1 (serverAuth); ca.crt
# DIR/client/                 tls.crt, tls.key, ca.crt: identity txscore-client (may score)
# DIR/admin/                  tls.crt, tls.key, ca.crt: identity txscore-admin (an operator: may
#                             reload and control claims jobs)
# DIR/monitor/                tls.crt, tls.key, ca.crt: identity txscore-monitor (read-only: probes,
#                             metrics, the dashboard without card tokens; deploy/kubernetes' probes)
# DIR/shard/                  tls.crt, tls.key, ca.crt: identity txscore-shard, which the replicas of
#                             a shard set present to each other (sharding.client_tls_dir and
#                             peer_identities: docs/scaling-out.md)
# TXSCORE_PKI_SERVER_NAMES    more DNS names for the server certificate, comma-separated (e.g.
#                             txscore-0.txscore,txscore-1.txscore for a StatefulSet's pods)
# Each directory is laid out as a Kubernetes TLS secret (ca.crt, tls.crt, tls.key), which is
# what `txscore score|job --tls-dir DIR` reads. Keys are mode 0600.
set -euo pipefail
force=0
if [[ "${1:-}" == "--force" ]]; then
  force=1
  shift
fi
dir="${1:-var/pki}"
umask 077
mkdir -p "$dir"

valid() {  # a certificate that exists and is valid for at least another day
  [[ -f "$1" ]] && openssl x509 -in "$1" -noout -checkend 86400 >/dev/null 2>&1
}

if [[ $force == 0 ]] && valid "$dir/ca.crt" && valid "$dir/server/tls.crt" && valid "$dir/client/tls.crt" &&
  valid "$dir/admin/tls.crt" && valid "$dir/monitor/tls.crt" && valid "$dir/shard/tls.crt"; then
  echo "demo PKI in $dir is already there and valid (--force to make it anew)"
  exit 0
fi

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 730 \
  -subj "/CN=txscore demo CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# issue NAME CN SAN USAGE: DIR/NAME/{tls.key,tls.crt,ca.crt}, signed by the demo CA.
issue() {
  local name=$1 cn=$2 san=$3 usage=$4
  local out="$dir/$name"
  mkdir -p "$out"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
    -keyout "$out/tls.key" -out "$out/tls.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$usage" "$san" >"$out/ext.cnf"
  openssl x509 -req -in "$out/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 397 -sha256 -extfile "$out/ext.cnf" -out "$out/tls.crt" 2>/dev/null
  rm -f "$out/tls.csr" "$out/ext.cnf"
  cp "$dir/ca.crt" "$out/ca.crt"
  chmod 600 "$out/tls.key"
}

extra_names=""
IFS=',' read -r -a names <<<"${TXSCORE_PKI_SERVER_NAMES:-}"
for name in "${names[@]}"; do
  [[ -n "$name" ]] && extra_names+=",DNS:$name"
done
issue server txscore-server "DNS:localhost,DNS:$(hostname),IP:127.0.0.1,IP:::1$extra_names" serverAuth
issue client txscore-client "DNS:txscore-client" clientAuth
issue admin txscore-admin "DNS:txscore-admin" clientAuth
issue monitor txscore-monitor "DNS:txscore-monitor" clientAuth
issue shard txscore-shard "DNS:txscore-shard" clientAuth
echo "demo PKI written to $dir: CA, server (localhost, 127.0.0.1${extra_names//DNS:/}), clients txscore-client, txscore-admin, txscore-monitor and txscore-shard"

# Shared by the bench scripts (source it): the configurations they run, defined once so that
# scripts comparing figures run the same thing. Call from the repository root.

# config_for BINARY SETTINGS: the file to pass BINARY's --config. Builds since the service
# settings split read SETTINGS (which names its pipeline file); older builds read one file with
# both, written beside it as SETTINGS.combined.yaml. Only keys every build since the first RPC
# bench knows are used, so that older builds can be compared with the same files.
config_for() {
  local binary=$1 settings=$2
  # grep reads the help whole (no -q): under the callers' pipefail, grep -q leaving at the
  # first match can fail the pipeline through the writer's SIGPIPE.
  if ! "$binary" score --help 2>/dev/null | grep -- "--plaintext" >/dev/null; then
    # Builds before TLS serve plaintext and know no `plaintext` key.
    sed -i 's/, plaintext: true//' "$settings"
  fi
  if "$binary" serve --help 2>/dev/null | grep "Service settings file" >/dev/null; then
    echo "$settings"
    return
  fi
  local dir pipeline
  dir=$(dirname "$settings")
  pipeline=$(sed -n 's/^pipeline: *\([^ #]*\).*/\1/p' "$settings")
  { grep -v '^pipeline: ' "$settings"; cat "$dir/$pipeline"; } > "$settings.combined.yaml"
  echo "$settings.combined.yaml"
}

# DIR/card.key, DIR/txscore.yaml (the service settings) and DIR/pipeline.yaml: the demo fraud
# model behind a server on free ports, with DURABILITY (sync or wal). Plaintext on both ports,
# or, with TLS=1, mutual TLS with a demo PKI in DIR/pki (clients: --tls-dir DIR/pki/client).
write_scoring_pipeline() {
  local dir=$1 durability=$2
  (umask 077 && openssl rand -out "$dir/card.key" 32)
  if [ "${TLS:-0}" = 1 ]; then
    ./scripts/make-demo-pki.sh "$dir/pki" > /dev/null
    cat > "$dir/txscore.yaml" <<YAML
pipeline: pipeline.yaml
server: {host: 127.0.0.1, port: 0, workers: 8}
admin: {host: 127.0.0.1, port: 0}
storage: {path: db, durability: $durability}
security:
  card_key_file: card.key
  tls: {certificate: pki/server/tls.crt, private_key: pki/server/tls.key, client_ca: pki/ca.crt,
        thrift_clients: [txscore-client], admin_clients: [txscore-admin]}
YAML
  else
    cat > "$dir/txscore.yaml" <<YAML
pipeline: pipeline.yaml
server: {host: 127.0.0.1, port: 0, workers: 8, plaintext: true}
admin: {host: 127.0.0.1, port: 0, plaintext: true}
storage: {path: db, durability: $durability}
security: {card_key_file: card.key}
YAML
  fi
  cat > "$dir/pipeline.yaml" <<YAML
pipeline: {name: bench, version: "bench"}
stages:
  - {name: features, kind: features}
  - {name: fraud, kind: xgboost, after: features, model: $PWD/var/models/fraud.ubj}
  - {name: decision, kind: decision, after: fraud}
YAML
}

# DIR/card.key, DIR/batch.yaml (the settings of `txscore batch run`) and DIR/claims.yaml: the
# claims model and, when LLM is 1, the LLM stage on the CPU with llm-tiny (1 thread, max_batch 8)
# for claims scoring 0.5 or more.
write_claims_pipeline() {
  local dir=$1 llm=$2
  (umask 077 && openssl rand -out "$dir/card.key" 32)
  cat > "$dir/batch.yaml" <<YAML
pipeline: claims.yaml
storage: {path: batch-db}
security: {card_key_file: card.key}
devices: {calibration_cache: profiles.json}
YAML
  cat > "$dir/claims.yaml" <<YAML
stages:
  - {name: features, kind: claim_features}
  - {name: claims_model, kind: xgboost, after: features, model: $PWD/var/models/claims.ubj}
YAML
  if [ "$llm" = 1 ]; then
    cat >> "$dir/claims.yaml" <<YAML
  - {name: analysis, kind: llm_findings, after: claims_model, when: "claims_model.score >= 0.5",
     model: $PWD/var/models/llm-tiny, threads: 1, max_batch: 8}
  - {name: decision, kind: decision, after: [claims_model, analysis]}
YAML
  else
    echo "  - {name: decision, kind: decision, after: claims_model}" >> "$dir/claims.yaml"
  fi
}

#include "service/settings.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <tuple>

#include "common/file_io.h"
#include "pipelines/bundle_digest.h"
#include "pipelines/yaml_reader.h"

namespace txscore::service {
namespace {

namespace fs = std::filesystem;

using pipelines::YamlReader;

Status ParseServer(const YamlReader& r, const YAML::Node& node, RpcServerConfig* out) {
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(
      node, "server",
      {"host", "port", "plaintext", "workers", "io_threads", "waiting_threads", "max_handshakes", "max_connections",
       "max_queued_requests", "frame_timeout_ms", "idle_timeout_ms", "stop_delay_ms", "drain_timeout_ms", "limits"}));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(node, "host", false, &out->host));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "port", 0, 65535, &out->port));
  TXSCORE_RETURN_IF_ERROR(r.ReadBool(node, "plaintext", &out->plaintext));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "workers", 1, 1024, &out->workers));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "io_threads", 1, 64, &out->io_threads));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "waiting_threads", 0, 1024, &out->waiting_threads));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "max_handshakes", 1, 65536, &out->max_handshakes));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "max_connections", 1, 1000000, &out->max_connections));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "max_queued_requests", 1, 1000000, &out->max_queued_requests));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "frame_timeout_ms", 1, 600000, &out->frame_timeout_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "idle_timeout_ms", 1, 86400000, &out->idle_timeout_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "stop_delay_ms", 0, 600000, &out->stop_delay_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "drain_timeout_ms", 1, 600000, &out->drain_timeout_ms));
  if (const YAML::Node limits = node["limits"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(
        limits, "server.limits",
        {"max_message_bytes", "max_frame_bytes", "max_string_bytes", "max_container_items", "max_recursion_depth"}));
    ThriftLimits& l = out->limits;
    constexpr int64_t kGiB = 1LL << 30;
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_message_bytes", 1024, kGiB, &l.max_message_bytes));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_frame_bytes", 1024, kGiB, &l.max_frame_bytes));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_string_bytes", 16, kGiB, &l.max_string_bytes));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_container_items", 1, 10000000, &l.max_container_items));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(limits, "max_recursion_depth", 4, 1000, &l.max_recursion_depth));
  }
  return Status::Ok();
}

// A list of names ([a, b] or a block list), each passing `check`.
Status ReadNameList(const YamlReader& r, const YAML::Node& map, const std::string& key,
                    const std::function<Status(const std::string&)>& check, std::vector<std::string>* out) {
  const YAML::Node list = map[key];
  if (!list.IsSequence() || list.size() == 0) return r.ErrorAt(list, "\"" + key + "\" must be a non-empty list");
  out->clear();
  for (const YAML::Node& item : list) {
    if (!item.IsScalar() || item.Scalar().empty()) return r.ErrorAt(item, "\"" + key + "\": each entry must be a name");
    Status checked = check(item.Scalar());
    if (!checked.ok()) return r.ErrorAt(item, checked.error().message);
    out->push_back(item.Scalar());
  }
  return Status::Ok();
}

// security.tls.issuers: a list of {ca, identities}.
Status ParseTlsIssuers(const YamlReader& r, const YAML::Node& node, TlsConfig* out) {
  if (!node.IsSequence()) return r.ErrorAt(node, "\"issuers\" must be a list of {ca, identities}");
  for (const YAML::Node& item : node) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(item, "security.tls.issuers[]", {"ca", "identities"}));
    TlsIssuerBinding binding;
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(item, "ca", true, YamlReader::PathMustBe::kRegularFile, &binding.ca));
    const auto under_a_prefix = [out](const std::string& name) -> Status {
      if (name.back() != '/') return Status::Ok();
      if (std::find(out->uri_identity_prefixes.begin(), out->uri_identity_prefixes.end(), name) !=
          out->uri_identity_prefixes.end()) {
        return Status::Ok();
      }
      return InvalidArgument("\"" + name + "\" ends in '/' (a trust domain) but is not on uri_identity_prefixes");
    };
    TXSCORE_RETURN_IF_ERROR(ReadNameList(r, item, "identities", under_a_prefix, &binding.identities));
    out->issuers.push_back(std::move(binding));
  }
  return Status::Ok();
}

// security.tls (service/tls.h). Files must exist; the key's mode is checked when it is loaded.
Status ParseTls(const YamlReader& r, const YAML::Node& node, TlsConfig* out) {
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(node, "security.tls",
                                      {"certificate", "private_key", "client_ca", "min_version", "thrift_clients",
                                       "admin_clients", "operators", "llm_api_clients", "card_token_clients",
                                       "uri_identity_prefixes", "cn_identity", "issuers", "crl_file", "groups"}));
  using PathMustBe = YamlReader::PathMustBe;
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(node, "certificate", true, PathMustBe::kRegularFile, &out->certificate));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(node, "private_key", true, PathMustBe::kRegularFile, &out->private_key));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(node, "client_ca", true, PathMustBe::kRegularFile, &out->client_ca));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(node, "crl_file", false, PathMustBe::kRegularFile, &out->crl_file));
  TXSCORE_RETURN_IF_ERROR(r.ReadBool(node, "cn_identity", &out->cn_identity));
  if (node["min_version"]) {
    std::string version;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(node, "min_version", false, &version));
    if (version != "1.2" && version != "1.3") {
      return r.ErrorAt(node["min_version"], "min_version must be \"1.2\" or \"1.3\", not \"" + version + "\"");
    }
    out->min_version = version == "1.3" ? TlsVersion::k1_3 : TlsVersion::k1_2;
  }
  const auto any_name = [](const std::string&) { return Status::Ok(); };
  for (const auto& [key, list] :
       {std::pair{"thrift_clients", &out->thrift_clients}, std::pair{"admin_clients", &out->admin_clients},
        std::pair{"operators", &out->operators}, std::pair{"llm_api_clients", &out->llm_api_clients},
        std::pair{"card_token_clients", &out->card_token_clients}}) {
    // `operators: []` (or another right's list) says "none" explicitly; an empty allowlist
    // would admit nobody.
    const YAML::Node given = node[key];
    const bool a_right = std::string(key) != "thrift_clients" && std::string(key) != "admin_clients";
    if (given && !(a_right && given.IsSequence() && given.size() == 0)) {
      TXSCORE_RETURN_IF_ERROR(ReadNameList(r, node, key, any_name, list));
    }
  }
  // A right given to an identity its port does not admit could never be used: a typo.
  for (const auto& [key, list, port, admitted] :
       {std::tuple{"llm_api_clients", &out->llm_api_clients, "admin_clients", &out->admin_clients},
        std::tuple{"card_token_clients", &out->card_token_clients, "thrift_clients", &out->thrift_clients}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      if (std::find(admitted->begin(), admitted->end(), (*list)[i]) == admitted->end()) {
        return r.ErrorAt(node[key][i], (*list)[i] + " is on " + key + " but not on " + port +
                                           ", which admits identities to that port");
      }
    }
  }
  if (node["uri_identity_prefixes"]) {
    // "spiffe://td" without its '/' would also take "spiffe://td.evil.example/...".
    const auto a_uri_prefix = [](const std::string& prefix) -> Status {
      if (prefix.find("://") != std::string::npos && prefix.back() == '/') return Status::Ok();
      return InvalidArgument("\"" + prefix +
                             "\" is no URI prefix: give a scheme and authority ending in '/', e.g. "
                             "\"spiffe://bank.example/\"");
    };
    TXSCORE_RETURN_IF_ERROR(ReadNameList(r, node, "uri_identity_prefixes", a_uri_prefix, &out->uri_identity_prefixes));
  }
  if (node["groups"]) TXSCORE_RETURN_IF_ERROR(ReadNameList(r, node, "groups", any_name, &out->groups));
  if (const YAML::Node issuers = node["issuers"]) TXSCORE_RETURN_IF_ERROR(ParseTlsIssuers(r, issuers, out));
  return Status::Ok();
}

// sharding (service/shard_map.h). `self` may come from `txscore serve --shard-name` instead:
// ShardMap::Create checks it when the server starts.
Status ParseSharding(const YamlReader& r, const YAML::Node& node, ShardingConfig* out) {
  TXSCORE_RETURN_IF_ERROR(
      r.ExpectMap(node, "sharding",
                  {"shards", "self", "client_tls_dir", "peer_identities", "connect_timeout_ms", "forward_timeout_ms",
                   "breaker_failures", "breaker_open_ms", "max_forwards_in_flight"}));
  const YAML::Node shards = node["shards"];
  if (!shards || !shards.IsSequence() || shards.size() == 0) {
    return r.ErrorAt(shards ? shards : node,
                     "sharding.shards must list every shard: - {name: ..., address: HOST:PORT}");
  }
  for (const YAML::Node& shard : shards) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(shard, "a shard", {"name", "address"}));
    ShardEndpoint endpoint;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(shard, "name", true, &endpoint.name));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(shard, "address", true, &endpoint.address));
    if (Result<HostPort> address = ParseHostPort(endpoint.address); !address.ok()) {
      return r.ErrorAt(shard["address"], address.error().message);
    }
    out->shards.push_back(std::move(endpoint));
  }
  std::vector<std::string> names;
  for (const ShardEndpoint& shard : out->shards) names.push_back(shard.name);
  if (Status valid = ValidateShardNames(names); !valid.ok()) return r.ErrorAt(shards, valid.error().message);
  TXSCORE_RETURN_IF_ERROR(r.ReadString(node, "self", false, &out->self));
  if (!out->self.empty() && std::find(names.begin(), names.end(), out->self) == names.end()) {
    return r.ErrorAt(node["self"], "sharding.self \"" + out->self + "\" is not among sharding.shards");
  }
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(node, "client_tls_dir", false, YamlReader::PathMustBe::kDirectory, &out->client_tls_dir));
  if (node["peer_identities"]) {
    TXSCORE_RETURN_IF_ERROR(ReadNameList(
        r, node, "peer_identities", [](const std::string&) { return Status::Ok(); }, &out->peer_identities));
  }
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "connect_timeout_ms", 1, 600000, &out->connect_timeout_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "forward_timeout_ms", 1, 600000, &out->forward_timeout_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "breaker_failures", 1, 1000, &out->breaker_failures));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "breaker_open_ms", 1, 3600000, &out->breaker_open_ms));
  TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "max_forwards_in_flight", 1, 100000, &out->max_forwards_in_flight));
  return Status::Ok();
}

// devices.backend: what the backend library is, where the file says it (accelerator/backend.h).
Status ParseBackend(const YamlReader& r, const YAML::Node& node, accelerator::BackendConfig* out) {
  TXSCORE_RETURN_IF_ERROR(
      r.ExpectMap(node, "devices.backend",
                  {"kind", "index", "dtypes", "native_ops", "memory_gib", "alignment", "emulator", "cost", "options"}));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(node, "kind", false, &out->kind));
  if (node["kind"]) {
    Status valid = accelerator::CheckKindName(out->kind, "kind");
    if (valid.ok() && (out->kind == accelerator::kCpuKind || out->kind == accelerator::kCudaKind)) {
      valid = InvalidArgument("kind \"" + out->kind + "\" is PyTorch's own; an out-of-tree backend needs another");
    }
    if (!valid.ok()) return r.ErrorAt(node["kind"], valid.error().message);
  }
  if (node["index"]) {
    int index = 0;
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "index", 0, 1024, &index));
    out->index = index;
  }
  if (node["dtypes"]) {
    std::vector<std::string> names;
    TXSCORE_RETURN_IF_ERROR(ReadNameList(
        r, node, "dtypes",
        [](const std::string& dtype) {
          return accelerator::ParseDtype(dtype)
                     ? Status::Ok()
                     : Status(InvalidArgument("unknown dtype \"" + dtype +
                                              "\" (known: " + accelerator::kKnownDtypeNames + ")"));
        },
        &names));
    std::vector<accelerator::Dtype> dtypes;
    for (const std::string& name : names) dtypes.push_back(*accelerator::ParseDtype(name));
    out->dtypes = std::move(dtypes);
  }
  if (node["native_ops"]) {
    std::vector<std::string> ops;
    TXSCORE_RETURN_IF_ERROR(ReadNameList(
        r, node, "native_ops",
        [](const std::string& op) {
          return accelerator::IsKnownOp(op)
                     ? Status::Ok()
                     : Status(
                           InvalidArgument("unknown op \"" + op + "\" (known: " + accelerator::KnownOpNames() + ")"));
        },
        &ops));
    out->native_ops = std::set<std::string>(ops.begin(), ops.end());
  }
  if (node["memory_gib"]) {
    double memory_gib = 0;
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(node, "memory_gib", 0.001, 1e6, &memory_gib));
    out->memory_bytes = static_cast<int64_t>(memory_gib * (1LL << 30));
  }
  if (node["alignment"]) {
    int alignment = 1;
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(node, "alignment", 1, 4096, &alignment));
    out->alignment = alignment;
  }
  if (node["emulator"]) {
    bool emulator = false;
    TXSCORE_RETURN_IF_ERROR(r.ReadBool(node, "emulator", &emulator));
    out->emulator = emulator;
  }
  if (const YAML::Node cost = node["cost"]) {
    TXSCORE_RETURN_IF_ERROR(
        r.ExpectMap(cost, "devices.backend.cost", {"dispatch_us", "tflops", "memory_gbps", "copy_gbps"}));
    for (const char* key : {"dispatch_us", "tflops", "memory_gbps", "copy_gbps"}) {
      if (!cost[key]) return r.ErrorAt(cost, std::string("devices.backend.cost needs ") + key);
    }
    accelerator::CostProfile p;
    double tflops = 0, memory_gbps = 0, copy_gbps = 0;
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(cost, "dispatch_us", 0, 1e6, &p.dispatch_us));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(cost, "tflops", 0.001, 1e4, &tflops));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(cost, "memory_gbps", 0.001, 1e5, &memory_gbps));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(cost, "copy_gbps", 0.001, 1e5, &copy_gbps));
    p.flops_per_s = tflops * 1e12;
    p.memory_bytes_per_s = memory_gbps * 1e9;
    p.copy_bytes_per_s = copy_gbps * 1e9;
    out->cost = p;
  }
  if (const YAML::Node options = node["options"]) {
    if (!options.IsMap()) return r.ErrorAt(options, "devices.backend.options must be a mapping of option to value");
    for (const auto& entry : options) {
      if (!entry.second.IsScalar()) {
        return r.ErrorAt(entry.second, "devices.backend.options: " + entry.first.Scalar() + " must be a single value");
      }
      out->options.emplace_back(entry.first.Scalar(), entry.second.Scalar());
    }
    // In key order: a map's order means nothing, so a reload that reorders it changes nothing.
    std::sort(out->options.begin(), out->options.end());
  }
  return Status::Ok();
}

Status ParseDevices(const YamlReader& r, const YAML::Node& node, DevicesConfig* out) {
  // The keys of earlier versions, named so that an old file says what to write instead.
  if (node.IsMap() && node["emulated"]) {
    return r.ErrorAt(node["emulated"],
                     "devices.emulated is no longer read: the emulated device is a backend library now; load it "
                     "with devices.backend_library (e.g. ../build/libtxscore_emulated_device.so) and put its "
                     "latency model under devices.backend.options");
  }
  if (node.IsMap() && node["backend_kind"]) {
    return r.ErrorAt(node["backend_kind"], "devices.backend_kind is now devices.backend.kind");
  }
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(node, "devices", {"backend_library", "backend", "calibration_cache"}));
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(node, "backend_library", false, pipelines::YamlReader::PathMustBe::kAnything, &out->backend.library));
  if (const YAML::Node backend = node["backend"]) TXSCORE_RETURN_IF_ERROR(ParseBackend(r, backend, &out->backend));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(node, "calibration_cache", false, pipelines::YamlReader::PathMustBe::kAnything,
                                     &out->calibration_cache));
  return Status::Ok();
}

// Every scalar under `node`, by its dotted path ("server.limits.max_frame_bytes"; list items
// as "devices.x[0]").
void Flatten(const YAML::Node& node, const std::string& path, std::map<std::string, std::string>* out) {
  if (node.IsMap()) {
    for (const auto& entry : node) Flatten(entry.second, path + "." + entry.first.Scalar(), out);
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) Flatten(node[i], path + "[" + std::to_string(i) + "]", out);
  } else {
    (*out)[path] = node.IsNull() ? "null" : node.Scalar();
  }
}

Result<ServiceSettings> Parse(const YAML::Node& root, const YamlReader& r, const std::string& source_path) {
  if (root.IsMap() && root["stages"]) {
    return r.ErrorAt(root["stages"],
                     "this is a pipeline file, not the service's settings: pass the settings file (e.g. "
                     "config/txscore.yaml), whose `pipeline:` names the pipeline file");
  }
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(
      root, "the settings file",
      {"pipeline", "pipeline_digest", "server", "admin", "storage", "security", "devices", "jobs", "sharding"}));
  ServiceSettings settings;
  settings.source_path = source_path;
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(root, "pipeline", true, YamlReader::PathMustBe::kRegularFile, &settings.pipeline));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(root, "pipeline_digest", false, &settings.pipeline_digest));
  if (root["pipeline_digest"] && !pipelines::IsBundleDigest(settings.pipeline_digest)) {
    return r.ErrorAt(root["pipeline_digest"],
                     "pipeline_digest must be \"sha256:\" and 64 lowercase hex digits, as `txscore pipeline digest` "
                     "prints it");
  }
  if (const YAML::Node s = root["server"]) TXSCORE_RETURN_IF_ERROR(ParseServer(r, s, &settings.server));
  if (const YAML::Node a = root["admin"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(a, "admin", {"host", "port", "plaintext", "probe_port"}));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(a, "host", false, &settings.admin.host));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(a, "port", 0, 65535, &settings.admin.port));
    if (a["probe_port"]) {
      int probe_port = 0;
      TXSCORE_RETURN_IF_ERROR(r.ReadInt(a, "probe_port", 0, 65535, &probe_port));
      settings.admin.probe_port = probe_port;
      if (probe_port != 0 && probe_port == settings.admin.port) {
        return r.ErrorAt(a["probe_port"],
                         "admin.probe_port must be another port than admin.port (" + std::to_string(probe_port) + ")");
      }
    }
    TXSCORE_RETURN_IF_ERROR(r.ReadBool(a, "plaintext", &settings.admin.plaintext));
    // Without TLS the admin port has no caller identity: it may listen on loopback only.
    const std::string& host = settings.admin.host;
    in_addr v4{};
    const bool loopback = host == "localhost" || host == "::1" ||
                          (::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127);
    if (settings.admin.plaintext && !loopback) {
      return r.ErrorAt(a["host"] ? a["host"] : a,
                       "admin.plaintext serves the admin port without TLS, so it listens on a loopback address only: "
                       "set admin.host to 127.0.0.1 or ::1 (not " +
                           host + "), or serve it over TLS (docs/security.md)");
    }
  }
  const YAML::Node storage = root["storage"];
  if (!storage) return r.ErrorAt(root, "missing required key \"storage\"");
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(storage, "storage", {"path", "durability", "audit_checkpoint_every"}));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(storage, "path", true, YamlReader::PathMustBe::kAnything, &settings.storage.path));
  if (storage["durability"]) {
    std::string durability;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(storage, "durability", false, &durability));
    Result<storage::Durability> parsed = storage::ParseDurability(durability);
    if (!parsed.ok()) return r.ErrorAt(storage["durability"], parsed.error().message);
    settings.storage.durability = *parsed;
  }
  TXSCORE_RETURN_IF_ERROR(
      r.ReadInt(storage, "audit_checkpoint_every", 1, 100000000, &settings.storage.audit_checkpoint_every));
  const YAML::Node security = root["security"];
  if (!security) return r.ErrorAt(root, "missing required key \"security\"");
  TXSCORE_RETURN_IF_ERROR(
      r.ExpectMap(security, "security", {"keyset", "card_key_file", "kek_file", "kek_env", "allow_core_dumps", "tls"}));
  TXSCORE_RETURN_IF_ERROR(r.ReadBool(security, "allow_core_dumps", &settings.security.allow_core_dumps));
  if (security["keyset"].IsDefined() == security["card_key_file"].IsDefined()) {
    return r.ErrorAt(security,
                     "security needs exactly one of keyset (a keyset file: txscore keys create) and "
                     "card_key_file (a raw key file from before keysets)");
  }
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(security, "keyset", false, YamlReader::PathMustBe::kRegularFile, &settings.security.keyset));
  TXSCORE_RETURN_IF_ERROR(r.ReadPath(security, "card_key_file", false, YamlReader::PathMustBe::kRegularFile,
                                     &settings.security.card_key_file));
  TXSCORE_RETURN_IF_ERROR(
      r.ReadPath(security, "kek_file", false, YamlReader::PathMustBe::kRegularFile, &settings.security.kek_file));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(security, "kek_env", false, &settings.security.kek_env));
  if (!settings.security.kek_file.empty() && !settings.security.kek_env.empty()) {
    return r.ErrorAt(security["kek_env"], "give the key-encryption key as kek_file or as kek_env, not both");
  }
  if (const YAML::Node tls = security["tls"]) {
    settings.security.tls.emplace();
    TXSCORE_RETURN_IF_ERROR(ParseTls(r, tls, &*settings.security.tls));
  }
  if (const YAML::Node d = root["devices"]) TXSCORE_RETURN_IF_ERROR(ParseDevices(r, d, &settings.devices));
  if (const YAML::Node j = root["jobs"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(j, "jobs",
                                        {"claims_pipeline", "claims_pipeline_digest", "input_dir", "output_dir",
                                         "chunk", "priority", "max_llm_shortfall_share", "max_error_share"}));
    std::string priority = "idle";
    TXSCORE_RETURN_IF_ERROR(r.ReadString(j, "priority", false, &priority));
    if (priority != "idle" && priority != "normal") {
      return r.ErrorAt(j["priority"], "priority must be idle or normal, not \"" + priority + "\"");
    }
    settings.jobs.priority = priority == "idle" ? JobsConfig::Priority::kIdle : JobsConfig::Priority::kNormal;
    TXSCORE_RETURN_IF_ERROR(
        r.ReadPath(j, "claims_pipeline", true, YamlReader::PathMustBe::kRegularFile, &settings.jobs.claims_pipeline));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(j, "claims_pipeline_digest", false, &settings.jobs.claims_pipeline_digest));
    if (j["claims_pipeline_digest"] && !pipelines::IsBundleDigest(settings.jobs.claims_pipeline_digest)) {
      return r.ErrorAt(j["claims_pipeline_digest"],
                       "claims_pipeline_digest must be \"sha256:\" and 64 lowercase hex digits, as `txscore pipeline "
                       "digest --pipeline " +
                           settings.jobs.claims_pipeline + "` prints it");
    }
    TXSCORE_RETURN_IF_ERROR(
        r.ReadPath(j, "input_dir", true, YamlReader::PathMustBe::kAnything, &settings.jobs.input_dir));
    TXSCORE_RETURN_IF_ERROR(
        r.ReadPath(j, "output_dir", true, YamlReader::PathMustBe::kAnything, &settings.jobs.output_dir));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(j, "chunk", 0, 100000, &settings.jobs.chunk));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(j, "max_llm_shortfall_share", 0, 1, &settings.jobs.max_llm_shortfall_share));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(j, "max_error_share", 0, 1, &settings.jobs.max_error_share));
  }
  if (const YAML::Node sharding = root["sharding"]) {
    TXSCORE_RETURN_IF_ERROR(ParseSharding(r, sharding, &settings.sharding));
    const ShardingConfig& sharded = settings.sharding;
    if (settings.server.plaintext && !sharded.peer_identities.empty()) {
      return r.ErrorAt(sharding["peer_identities"],
                       "sharding.peer_identities needs TLS on the Thrift port: on a plaintext port callers have "
                       "no identity (and any caller may forward)");
    }
    if (!settings.server.plaintext && settings.security.tls && sharded.shards.size() > 1) {
      if (sharded.client_tls_dir.empty()) {
        return r.ErrorAt(sharding,
                         "sharding.client_tls_dir is required when the Thrift port serves TLS: the "
                         "certificate this replica presents when it forwards a card to its owner");
      }
      if (sharded.peer_identities.empty()) {
        return r.ErrorAt(sharding,
                         "sharding.peer_identities is required when the Thrift port serves TLS: the "
                         "identity of the replicas' own certificate (client_tls_dir), and no caller's");
      }
      for (const std::string& peer : sharded.peer_identities) {
        const std::vector<std::string>& admitted = settings.security.tls->thrift_clients;
        if (std::find(admitted.begin(), admitted.end(), peer) == admitted.end()) {
          return r.ErrorAt(
              sharding["peer_identities"],
              "shard peer " + peer + " is not on security.tls.thrift_clients: the other replicas could not connect");
        }
      }
    }
  }
  for (const char* section : {"server", "admin", "storage", "security", "devices", "jobs", "sharding"}) {
    if (const YAML::Node node = root[section]) Flatten(node, section, &settings.restart_only);
  }
  // Reloadable: certificates, keys and allowlists, and the keyset, are read again by each reload.
  for (auto it = settings.restart_only.begin(); it != settings.restart_only.end();) {
    const bool reloadable = it->first.rfind("security.tls", 0) == 0 || it->first == "security.keyset" ||
                            it->first == "security.kek_file" || it->first == "security.kek_env";
    it = reloadable ? settings.restart_only.erase(it) : std::next(it);
  }
  return settings;
}

}  // namespace

const char* PriorityName(JobsConfig::Priority priority) {
  return priority == JobsConfig::Priority::kIdle ? "idle" : "normal";
}

std::vector<std::string> RestartOnlyChanges(const ServiceSettings& running, const ServiceSettings& loaded) {
  // A section whose values are the same is no change, however it is written (a default made
  // explicit, a path written another way): only the keys of sections that differ are named.
  const std::map<std::string, bool> section_changed = {
      {"server", !(running.server == loaded.server)},
      {"admin", !(running.admin == loaded.admin)},
      {"storage", !(running.storage == loaded.storage)},
      {"security", running.security.card_key_file != loaded.security.card_key_file},
      {"devices", !(running.devices == loaded.devices)},
      {"jobs", !(running.jobs == loaded.jobs)},
      {"sharding", !(running.sharding == loaded.sharding)},
  };
  std::vector<std::string> changes;
  std::set<std::string> keys, named_sections;
  for (const auto& [key, value] : running.restart_only) keys.insert(key);
  for (const auto& [key, value] : loaded.restart_only) keys.insert(key);
  for (const std::string& key : keys) {
    const std::string section = key.substr(0, key.find('.'));
    if (!section_changed.at(section)) continue;
    const auto before = running.restart_only.find(key);
    const auto after = loaded.restart_only.find(key);
    const std::string was = before == running.restart_only.end() ? "(default)" : before->second;
    const std::string now = after == loaded.restart_only.end() ? "(default)" : after->second;
    if (was != now) {
      changes.push_back(key + ": " + was + " -> " + now);
      named_sections.insert(section);
    }
  }
  // Values that differ with the same text (a relative path resolved elsewhere): the section.
  for (const auto& [section, changed] : section_changed) {
    if (changed && named_sections.count(section) == 0) changes.push_back(section + ": changed");
  }
  std::sort(changes.begin(), changes.end());
  return changes;
}

Result<ServiceSettings> ParseServiceSettings(const std::string& yaml_text, const std::string& source_path) {
  YamlReader reader(source_path, fs::path(source_path).parent_path());
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsDefined() || root.IsNull()) return InvalidArgument(source_path + ": the file is empty");
    return Parse(root, reader, source_path);
  } catch (const YAML::Exception& e) {
    return reader.ParseFailure(yaml_text, e);
  }
}

Result<ServiceSettings> LoadServiceSettings(const std::string& path) {
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "settings file");
  if (!text.ok()) return text.error();
  return ParseServiceSettings(*text, path);
}

}  // namespace txscore::service

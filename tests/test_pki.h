// A certificate authority and certificates for TLS tests, made with OpenSSL's API (EC P-256,
// milliseconds) once per test process. Each client directory is laid out as txscore's clients
// read it (service/tls.h, TlsClientFilesIn): ca.crt (the CA the server's certificate chains
// to), tls.crt and tls.key (mode 0600).
#pragma once

#include <string>

namespace txscore::testing {

struct TestPki {
  std::string dir;
  std::string ca_certificate;                  // DIR/ca.crt
  std::string server_certificate, server_key;  // CN txscore-server, SAN DNS localhost and IP 127.0.0.1
  std::string client_dir;                      // txscore-client: on the Thrift port's allowlist
  std::string admin_dir;                       // txscore-admin: on both allowlists, and an operator
  std::string stranger_dir;                    // txscore-stranger: a valid certificate on no allowlist
  std::string expired_dir;                     // txscore-client, expired yesterday
  std::string rogue_dir;                       // txscore-client, issued by another CA
  std::string uri_dir;            // SAN URI spiffe://txscore.test/client only, CN other: the URI is its identity
  std::string cn_behind_san_dir;  // SAN DNS someone-else, CN txscore-admin: a CN counts only without SANs
  std::string ca_as_client_dir;   // the CA's own certificate and key, presented as a client's
  std::string other_server_dir;   // the rogue CA's server certificate files (tls.crt, tls.key) and its ca.crt
};

// Made on first use, in a directory removed when the process exits.
const TestPki& SharedTestPki();

// `security.tls` for a server using SharedTestPki (indented for `security:`): thrift_clients
// txscore-client, txscore-admin and spiffe://txscore.test/client; admin_clients txscore-admin
// and spiffe://txscore.test/client (which is no operator); operators txscore-admin.
std::string TestTlsSettingsYaml();

}  // namespace txscore::testing

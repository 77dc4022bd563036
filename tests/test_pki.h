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
  std::string longer_name_dir;    // txscore-client-x: begins like an allowed name
  std::string shorter_name_dir;   // txscore-clien: an allowed name begins like it
  std::string nul_name_dir;       // SAN DNS "txscore-admin\0.evil.example": a name with a NUL byte
  std::string dns_uri_dir;        // SAN DNS "spiffe://txscore.test/client": a URI written as a DNS name
  std::string cn_behind_san_dir;  // SAN DNS someone-else, CN txscore-admin: a CN counts only without SANs
  std::string ca_as_client_dir;   // the CA's own certificate and key, presented as a client's
  // A sub-CA of the test CA named txscore-client whose key usage also allows signing a TLS
  // client's handshake: OpenSSL accepts it as a client; txscore's own check must refuse it.
  std::string client_ca_as_client_dir;
  std::string other_server_dir;  // the rogue CA's server certificate files (tls.crt, tls.key) and its ca.crt
  // A server certificate of the test CA naming DNS:localhost alone (no IP): a client that dials
  // 127.0.0.1 must refuse it, one that dials localhost takes it.
  std::string localhost_only_server_dir;

  // A sub-CA of the test CA, name-constrained to DNS:.partner.example (a partner's CA under a
  // shared root). Its clients' tls.crt holds the leaf and then the sub-CA's certificate.
  std::string partner_ca_certificate;
  std::string partner_dir;           // SAN DNS svc.partner.example: within the constraint
  std::string partner_cn_only_dir;   // no SAN, CN txscore-admin
  std::string partner_ip_only_dir;   // SAN IP 10.1.2.3 only, CN txscore-admin
  std::string partner_uri_only_dir;  // SAN URI "txscore-admin" only, CN txscore-admin
  std::string partner_outside_dir;   // SAN DNS txscore-admin: outside the constraint
  std::string partner_spiffe_dir;    // SAN URI spiffe://txscore.test/client (URIs are not constrained)
  // Another root CA (an enterprise CA shared with other services), and a bundle of both roots.
  std::string enterprise_ca_certificate;
  std::string ca_bundle;             // DIR/ca-bundle.crt: the test CA, then the enterprise CA
  std::string enterprise_admin_dir;  // SAN DNS txscore-admin, issued by the enterprise CA
  // Revocation: revoked_dir (txscore-client from the test CA) is on `crl`; `empty_crl` revokes
  // nothing. Both are the test CA's, valid for 30 days.
  std::string revoked_dir;
  std::string crl, empty_crl;
  std::string stale_crl;  // the test CA's, revoking nothing, past its next update since yesterday
};

// Made on first use, in a directory removed when the process exits.
const TestPki& SharedTestPki();

// DIR/NAME of SharedTestPki: a txscore-client certificate of the test CA that expires `seconds`
// from now (for a test that watches a certificate expire).
std::string IssueClientValidFor(const std::string& name, long seconds);

// `security.tls` for a server using SharedTestPki (indented for `security:`): thrift_clients
// txscore-client, txscore-admin and spiffe://txscore.test/client; admin_clients txscore-admin
// and spiffe://txscore.test/client (which is no operator); operators and llm_api_clients
// txscore-admin; no card_token_clients; SAN URIs under spiffe://txscore.test/ are identities.
std::string TestTlsSettingsYaml();

}  // namespace txscore::testing

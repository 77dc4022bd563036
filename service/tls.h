// TLS for both ports (OpenSSL): the server's certificate, client certificates verified against
// a configured CA, and who may connect and who may change things.
//
// Mutual TLS is how a caller is known: a client must present a certificate that chains to
// `client_ca`, is in its validity period, is not revoked (`crl_file`), and names an identity on
// the port's allowlist. A certificate's identities are its SAN DNS names, and its SAN URIs only
// under a configured prefix (a SPIFFE trust domain); its subject CN only where the settings
// allow it explicitly. An identity bound to an issuing CA (`issuers`) is admitted only from a
// certificate whose verified chain holds that CA, so a CA shared with other uses (or a CA
// bundle) cannot mint an operator. Anything else is refused during the handshake or right after
// it, and counted by reason (TlsRefusal). An identity on `operators` may change things: reload
// the pipeline (admin port), submit and cancel claims jobs (Thrift port); each such action is
// written to the audit trail with the identity that did it.
//
// A TlsServerContext is immutable: a reload builds a new one from the files (certificates,
// keys and CRLs rotated on disk are picked up) and new connections take it; an open connection
// is verified again under it (chain, validity, revocation, names) at its next request.
//
// OpenSSL errors become txscore Errors here and nowhere else; no OpenSSL header leaks out.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"

struct ssl_ctx_st;
struct ssl_st;
struct stack_st_X509;
struct x509_st;

namespace txscore::service {

enum class TlsVersion { k1_2, k1_3 };

// Identities that only one CA may vouch for.
struct TlsIssuerBinding {
  // required: PEM, the CA(s) that must have issued the client's certificate itself (its direct
  // issuer: a root, or the intermediate that signs client certificates; a sub-CA below it may not)
  std::string ca;
  // required: exact identities, or URI prefixes ending in '/' (a trust domain: every URI under it)
  std::vector<std::string> identities;
  bool operator==(const TlsIssuerBinding&) const = default;
};

// `security.tls` in the service settings (service/settings.h). Reloadable: SIGHUP or
// POST /admin/reload reads the files again and applies changed lists.
struct TlsConfig {
  std::string certificate;                    // required: PEM, the server's certificate (and its chain)
  std::string private_key;                    // required: PEM; refused when group or others may read the file
  std::string client_ca;                      // required: PEM, the CA(s) client certificates must chain to
  TlsVersion min_version = TlsVersion::k1_2;  // Default: TLS 1.2 (1.3 is preferred when both ends have it)
  std::vector<std::string> thrift_clients;    // required: identities that may connect to the Thrift port
  std::vector<std::string> admin_clients;     // required: identities that may connect to the admin port
  std::vector<std::string> operators;         // Default: none. Identities that may change things
  // Default: none. Identities (admitted by admin_clients) that may use the OpenAI-compatible API,
  // which runs generation on the engine the forensic stage shares: not every admin identity (a
  // Prometheus scraper's) may.
  std::vector<std::string> llm_api_clients;
  // Default: none. Identities (admitted by thrift_clients) that may send a transaction's
  // card_token instead of its card_number: whoever sends a token acts on that card's history.
  std::vector<std::string> card_token_clients;
  // Default: none (SAN URIs name nobody). A SAN URI is an identity only when it begins with one
  // of these, each ending in '/' (a SPIFFE trust domain: "spiffe://bank.example/"); the identity
  // is the whole URI. URIs and DNS names never share a namespace: "txscore-admin" as a URI is
  // nobody.
  std::vector<std::string> uri_identity_prefixes;
  // Default: false. true: a certificate with no subjectAltName at all is named by its subject
  // CN. A CA's name constraints do not bind a CN that is no host name, so a sub-CA constrained to
  // DNS:.partner.example could issue CN=txscore-admin: leave this off unless every CA of
  // client_ca is yours alone.
  bool cn_identity = false;
  // Default: none (any CA of client_ca may issue any identity). Identities bound to their CA.
  std::vector<TlsIssuerBinding> issuers;
  // Default: none (no revocation check). PEM file of CRLs, read again by each reload; with one,
  // every client certificate's issuer must have a current CRL in it, or the client is refused.
  std::string crl_file;
  // Default: X25519, P-256, P-384. Key-exchange groups offered; the finite-field groups TLS 1.3
  // would otherwise accept cost the server ~50 times an X25519 handshake each.
  std::vector<std::string> groups = {"X25519", "P-256", "P-384"};
  bool operator==(const TlsConfig&) const = default;
};

enum class TlsPort { kThrift, kAdmin };
const char* TlsPortName(TlsPort port);

// Why a client was refused; counted per port (txscore_tls_refusals_total{port, reason}).
enum class TlsRefusal {
  kNoCertificate,         // the client sent none
  kUntrustedCertificate,  // it does not chain to client_ca (an unknown CA, self-signed, bad signature)
  kExpiredCertificate,    // outside its validity period
  kIdentityNotAllowed,    // valid, but none of its names is on the port's allowlist
  kWrongIssuer,           // an allowed name, bound (issuers) to a CA that is not in its chain
  kRevokedCertificate,    // on a CRL of crl_file, or its issuer's CRL is missing or out of date
  kProtocolVersion,       // an older TLS (or SSL) version than min_version
  kNotTls,                // the client did not speak TLS (plaintext Thrift, HTTP, random bytes)
  kHandshakeTimeout,      // the handshake was not done within the port's frame timeout
  kHandshakeFailed,       // any other handshake error
};
constexpr size_t kTlsRefusalCount = 10;
const char* TlsRefusalName(TlsRefusal refusal);
// Told of each refused client by the port that refused it, on its IO thread (it must not
// block): the audit trail's record of refusals (service/refusal_records.h). `address`: IP:PORT.
using TlsRefusalObserver =
    std::function<void(TlsPort port, const std::string& address, TlsRefusal refusal, const std::string& detail)>;

// Counts of refusals by reason, for one port. Thread-safe.
class TlsRefusalCounters {
 public:
  void Add(TlsRefusal refusal);
  uint64_t Get(TlsRefusal refusal) const;

 private:
  std::array<std::atomic<uint64_t>, kTlsRefusalCount> counts_{};
};

// Who sent a request.
struct Caller {
  // The allowlisted name from the client's certificate; empty on a plaintext port.
  std::string identity;
  std::string address;  // the peer's IP:port
  // What it may do beyond what its port admits it to (scoring by card number on the Thrift
  // port; probes, metrics and the dashboard without card tokens on the admin port), from the
  // lists its certificate's admitted names are on. On a plaintext port there is no identity:
  // only loopback callers may operate and use the LLM API, and any caller may send card tokens
  // (the settings said plaintext explicitly, for a trusted network, and start-up warned).
  bool is_operator = false;           // operators: reload, claims jobs and their status, card tokens on the dashboard
  bool may_use_llm_api = false;       // llm_api_clients: the OpenAI-compatible API
  bool may_send_card_tokens = false;  // card_token_clients: score by card_token
  bool operator==(const Caller&) const = default;
  // For logs and the audit trail: "txscore-admin (127.0.0.1:5555)", or
  // "unauthenticated 127.0.0.1:5555" on a plaintext port.
  std::string Describe() const;
};

// The outcome of admitting a client after its handshake.
struct Admission {
  bool admitted = false;
  Caller caller;                                      // when admitted
  TlsRefusal refusal = TlsRefusal::kHandshakeFailed;  // when not
  std::string detail;                                 // when not: OpenSSL's reason, or the names the certificate had
};

class TlsServerContext {
 public:
  // Loads the certificate, private key and client CA, checks that the key matches the
  // certificate and that its file is not readable by group or others. Errors name the file.
  static Result<std::shared_ptr<const TlsServerContext>> Create(const TlsConfig& config);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // A new server-side SSL object for one connection (owned by the caller: SSL_free), or null
  // when OpenSSL is out of memory.
  ssl_st* NewConnection() const;
  // After a completed handshake on `ssl`: whether the client's certificate names an identity
  // allowed on `port` (from a CA it is bound to), and who it is.
  Admission Admit(ssl_st* ssl, TlsPort port, const std::string& address) const;
  // For a connection accepted under another context (before a reload): verifies the client's
  // certificate chain again under this context's CAs and CRLs at the current time, then admits
  // it as Admit does. A removed CA, an expired or a revoked certificate is refused.
  Admission Readmit(ssl_st* ssl, TlsPort port, const std::string& address) const;
  // Why a handshake on `ssl` failed, from its verify result and `error`, the first OpenSSL
  // error code of the failure (ERR_peek_error; Asio's ssl error_code value); 0 when the client
  // just closed the connection.
  Admission Refuse(ssl_st* ssl, unsigned long error) const;

  ssl_ctx_st* native() const { return ctx_; }
  const TlsConfig& config() const { return config_; }

 private:
  struct Issuer;
  TlsServerContext();
  // Admission of the certificate chain `chain` (leaf first, as verified, up to its root).
  Admission AdmitChain(stack_st_X509* chain, TlsPort port, const std::string& address) const;
  ssl_ctx_st* ctx_ = nullptr;
  TlsConfig config_;
  std::set<std::string> thrift_clients_, admin_clients_, operators_, llm_api_clients_, card_token_clients_;
  std::vector<Issuer> issuers_;
};

// How a certificate's names become identities (TlsConfig's uri_identity_prefixes, cn_identity).
struct IdentityRules {
  std::vector<std::string> uri_prefixes;
  bool cn_identity = false;
};

// The names a certificate vouches for: its SAN DNS names that are host names, then its SAN
// URIs that begin with one of the rules' prefixes; the subject's CN only when the rules allow
// it and it has no SAN. Each once.
std::vector<std::string> CertificateIdentities(x509_st* certificate, const IdentityRules& rules);

// An error naming `path` unless only its owner may read it (mode 0600 or 0400): a private key
// or key file that others can read is refused.
Status CheckPrivateFile(const std::string& path, const std::string& what);

// The client side (txscore score, job, the load generator, tests): files a client presents.
// The conventional names of a Kubernetes TLS secret: DIR/ca.crt, DIR/tls.crt, DIR/tls.key.
struct TlsClientFiles {
  std::string ca;           // the CA the server's certificate must chain to
  std::string certificate;  // the client's certificate
  std::string private_key;  // its key
  bool empty() const { return ca.empty() && certificate.empty() && private_key.empty(); }
};
TlsClientFiles TlsClientFilesIn(const std::string& dir);

}  // namespace txscore::service

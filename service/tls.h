// TLS for both ports (OpenSSL): the server's certificate, client certificates verified against
// a configured CA, and who may connect and who may change things.
//
// Mutual TLS is how a caller is known: a client must present a certificate that chains to
// `client_ca`, is in its validity period, and names (SAN DNS, SAN URI or subject CN) an identity
// on the port's allowlist. Anything else is refused during the handshake or right after it, and
// counted by reason (TlsRefusal). An identity on `operators` may change things: reload the
// pipeline (admin port), submit and cancel claims jobs (Thrift port); each such action is
// written to the audit trail with the identity that did it.
//
// A TlsServerContext is immutable: a reload builds a new one from the files (certificates and
// keys rotated on disk are picked up) and new connections take it; open connections keep the
// one they were accepted with.
//
// OpenSSL errors become txscore Errors here and nowhere else; no OpenSSL header leaks out.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"

struct ssl_ctx_st;
struct ssl_st;

namespace txscore::service {

enum class TlsVersion { k1_2, k1_3 };

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
  kProtocolVersion,       // an older TLS (or SSL) version than min_version
  kNotTls,                // the client did not speak TLS (plaintext Thrift, HTTP, random bytes)
  kHandshakeTimeout,      // the handshake was not done within the port's frame timeout
  kHandshakeFailed,       // any other handshake error
};
constexpr size_t kTlsRefusalCount = 8;
const char* TlsRefusalName(TlsRefusal refusal);

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
  // May change things (the identity is an operator). On a plaintext port there is no identity:
  // the Thrift port lets anyone operate and the admin port only loopback callers (the settings
  // said plaintext explicitly, and start-up warned).
  bool is_operator = false;
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
  // allowed on `port`, and who it is.
  Admission Admit(ssl_st* ssl, TlsPort port, const std::string& address) const;
  // Why a handshake on `ssl` failed, from its verify result and `error`, the first OpenSSL
  // error code of the failure (ERR_peek_error; Asio's ssl error_code value); 0 when the client
  // just closed the connection.
  Admission Refuse(ssl_st* ssl, unsigned long error) const;

  ssl_ctx_st* native() const { return ctx_; }
  const TlsConfig& config() const { return config_; }

 private:
  TlsServerContext() = default;
  ssl_ctx_st* ctx_ = nullptr;
  TlsConfig config_;
  std::set<std::string> thrift_clients_, admin_clients_, operators_;
};

// The names a certificate vouches for: its SAN DNS names, then its SAN URIs; the subject's CN
// only when it has neither. Each once.
std::vector<std::string> CertificateIdentities(ssl_st* ssl);

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

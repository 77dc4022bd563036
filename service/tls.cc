#include "service/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstring>

namespace txscore::service {
namespace {

// What OpenSSL's error queue says, oldest first, and the queue cleared.
std::string DrainOpenSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? "no reason given" : text;
}

// Forward-secret AEAD suites only (TLS 1.2); TLS 1.3's own suites are all of that kind.
constexpr const char* kTls12Ciphers = "ECDHE+AESGCM:ECDHE+CHACHA20";

std::string Utf8(const ASN1_STRING* value) {
  const unsigned char* data = ASN1_STRING_get0_data(value);
  const int length = ASN1_STRING_length(value);
  if (data == nullptr || length <= 0) return {};
  std::string text(reinterpret_cast<const char*>(data), static_cast<size_t>(length));
  // A name with an embedded NUL ("good.example\0.evil") is a known trick: it names nobody.
  if (text.find('\0') != std::string::npos) return {};
  return text;
}

}  // namespace

const char* TlsPortName(TlsPort port) { return port == TlsPort::kThrift ? "thrift" : "admin"; }

const char* TlsRefusalName(TlsRefusal refusal) {
  switch (refusal) {
    case TlsRefusal::kNoCertificate:
      return "no_certificate";
    case TlsRefusal::kUntrustedCertificate:
      return "untrusted_certificate";
    case TlsRefusal::kExpiredCertificate:
      return "expired_certificate";
    case TlsRefusal::kIdentityNotAllowed:
      return "identity_not_allowed";
    case TlsRefusal::kProtocolVersion:
      return "protocol_version";
    case TlsRefusal::kNotTls:
      return "not_tls";
    case TlsRefusal::kHandshakeTimeout:
      return "handshake_timeout";
    case TlsRefusal::kHandshakeFailed:
      return "handshake_failed";
  }
  return "handshake_failed";
}

void TlsRefusalCounters::Add(TlsRefusal refusal) {
  counts_[static_cast<size_t>(refusal)].fetch_add(1, std::memory_order_relaxed);
}
uint64_t TlsRefusalCounters::Get(TlsRefusal refusal) const {
  return counts_[static_cast<size_t>(refusal)].load(std::memory_order_relaxed);
}

std::string Caller::Describe() const {
  if (identity.empty()) return "unauthenticated " + address;
  return identity + " (" + address + ")";
}

Status CheckPrivateFile(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return NotFound(what + " " + path + " cannot be read: " + std::strerror(errno));
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return InvalidArgument(what + " " + path + " has mode " + mode +
                           ": group or others may read it; only its owner may (chmod 600 " + path + ")");
  }
  return Status::Ok();
}

Result<std::shared_ptr<const TlsServerContext>> TlsServerContext::Create(const TlsConfig& config) {
  // OpenSSL writes to sockets with write(2): a client gone mid-handshake would raise SIGPIPE,
  // whose default action ends the process. The failed write's EPIPE is handled instead.
  ::signal(SIGPIPE, SIG_IGN);
  TXSCORE_RETURN_IF_ERROR(CheckPrivateFile(config.private_key, "the TLS private key"));
  std::shared_ptr<TlsServerContext> context(new TlsServerContext());
  context->config_ = config;
  context->thrift_clients_ = {config.thrift_clients.begin(), config.thrift_clients.end()};
  context->admin_clients_ = {config.admin_clients.begin(), config.admin_clients.end()};
  context->operators_ = {config.operators.begin(), config.operators.end()};
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Internal("cannot create a TLS context: " + DrainOpenSslErrors());
  context->ctx_ = ctx;
  const auto failed = [](const std::string& what) { return InvalidArgument(what + ": " + DrainOpenSslErrors()); };
  SSL_CTX_set_min_proto_version(ctx, config.min_version == TlsVersion::k1_3 ? TLS1_3_VERSION : TLS1_2_VERSION);
  // No renegotiation (a client could make the server do handshakes at will), no compression
  // (CRIME), and decrypted bytes wiped from OpenSSL's buffers once read: a request holds a card
  // number, and no copy of it may stay in memory (docs/rpc.md).
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                               SSL_OP_CLEANSE_PLAINTEXT | SSL_OP_NO_TICKET);
  // Callers keep their connections open: resumption would save little, and a session cache
  // would outlive a certificate reload.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 0);  // TLS 1.3 would send tickets no one can use
  // Non-blocking sockets: a write may take part of a buffer, and an idle connection gives its
  // read and write buffers back (thousands of idle callers cost little).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1) return failed("cannot set the TLS 1.2 cipher suites");
  if (SSL_CTX_use_certificate_chain_file(ctx, config.certificate.c_str()) != 1) {
    return failed("cannot load the TLS certificate " + config.certificate);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, config.private_key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return failed("cannot load the TLS private key " + config.private_key);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return failed("the TLS private key " + config.private_key + " does not belong to the certificate " +
                  config.certificate);
  }
  if (SSL_CTX_load_verify_locations(ctx, config.client_ca.c_str(), nullptr) != 1) {
    return failed("cannot load the client CA " + config.client_ca);
  }
  STACK_OF(X509_NAME)* ca_names = SSL_load_client_CA_file(config.client_ca.c_str());
  if (ca_names == nullptr) return failed("the client CA file " + config.client_ca + " holds no certificate");
  SSL_CTX_set_client_CA_list(ctx, ca_names);  // takes ownership
  // Every client must present a certificate that chains to client_ca; Admit then checks its names.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_verify_depth(ctx, 4);
  return std::shared_ptr<const TlsServerContext>(std::move(context));
}

TlsServerContext::~TlsServerContext() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

ssl_st* TlsServerContext::NewConnection() const { return SSL_new(ctx_); }

std::vector<std::string> CertificateIdentities(ssl_st* ssl) {
  std::vector<std::string> names;
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return names;
  if (auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
    for (int pass = 0; pass < 2; ++pass) {  // DNS names first, then URIs
      for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
        const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
        if (pass == 0 && name->type == GEN_DNS) names.push_back(Utf8(name->d.dNSName));
        if (pass == 1 && name->type == GEN_URI) names.push_back(Utf8(name->d.uniformResourceIdentifier));
      }
    }
    GENERAL_NAMES_free(sans);
  }
  // The CN only when there is no SAN name (RFC 6125): a CA's name constraints bind SANs, and
  // OpenSSL checks a CN against them only when it looks like a host name, so a constrained
  // sub-CA could otherwise issue "CN=txscore-admin".
  const X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (names.empty() && index >= 0) {
    names.push_back(Utf8(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index))));
  }
  // Each name once, in order (a CN usually repeats a SAN DNS name).
  std::vector<std::string> unique;
  for (std::string& name : names) {
    if (!name.empty() && std::find(unique.begin(), unique.end(), name) == unique.end())
      unique.push_back(std::move(name));
  }
  return unique;
}

Admission TlsServerContext::Admit(ssl_st* ssl, TlsPort port, const std::string& address) const {
  Admission admission;
  if (SSL_get0_peer_certificate(ssl) == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    // Cannot happen with SSL_VERIFY_FAIL_IF_NO_PEER_CERT; refuse rather than assume.
    admission.refusal = TlsRefusal::kNoCertificate;
    admission.detail = "no verified client certificate";
    return admission;
  }
  if (X509_check_ca(SSL_get0_peer_certificate(ssl)) != 0) {
    admission.refusal = TlsRefusal::kUntrustedCertificate;
    admission.detail = "a CA certificate is not a client certificate";
    return admission;
  }
  const std::set<std::string>& allowed = port == TlsPort::kThrift ? thrift_clients_ : admin_clients_;
  const std::vector<std::string> names = CertificateIdentities(ssl);
  // An allowed name that is also an operator's wins, so one certificate can carry both a
  // service name and an operator role.
  for (const std::string& name : names) {
    if (allowed.count(name) == 0) continue;
    if (!admission.admitted || (operators_.count(name) != 0 && !admission.caller.is_operator)) {
      admission.admitted = true;
      admission.caller.identity = name;
      admission.caller.is_operator = operators_.count(name) != 0;
    }
  }
  admission.caller.address = address;
  if (!admission.admitted) {
    admission.refusal = TlsRefusal::kIdentityNotAllowed;
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    admission.detail = "the certificate names " + (list.empty() ? std::string("nobody") : list) +
                       ", none of them allowed on the " + TlsPortName(port) + " port";
  }
  return admission;
}

Admission TlsServerContext::Refuse(ssl_st* ssl, unsigned long error) const {
  Admission refused;
  const int reason = ERR_GET_REASON(error);
  const long verify = SSL_get_verify_result(ssl);
  if (error != 0) {
    char text[256];
    ERR_error_string_n(error, text, sizeof text);
    refused.detail = text;
  } else {
    refused.detail = "the client closed the connection during the handshake";
  }
  if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    refused.refusal = TlsRefusal::kNoCertificate;
  } else if (verify == X509_V_ERR_CERT_HAS_EXPIRED || verify == X509_V_ERR_CERT_NOT_YET_VALID) {
    refused.refusal = TlsRefusal::kExpiredCertificate;
    refused.detail = X509_verify_cert_error_string(verify);
  } else if (verify != X509_V_OK) {
    refused.refusal = TlsRefusal::kUntrustedCertificate;
    refused.detail = X509_verify_cert_error_string(verify);
  } else if (reason == SSL_R_UNSUPPORTED_PROTOCOL || reason == SSL_R_VERSION_TOO_LOW) {
    refused.refusal = TlsRefusal::kProtocolVersion;
  } else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_HTTP_REQUEST ||
             reason == SSL_R_HTTPS_PROXY_REQUEST || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
             reason == SSL_R_UNKNOWN_PROTOCOL) {
    refused.refusal = TlsRefusal::kNotTls;
  } else {
    refused.refusal = TlsRefusal::kHandshakeFailed;
  }
  return refused;
}

TlsClientFiles TlsClientFilesIn(const std::string& dir) {
  return {dir + "/ca.crt", dir + "/tls.crt", dir + "/tls.key"};
}

}  // namespace txscore::service

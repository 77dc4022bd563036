#include "service/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "common/file_io.h"

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

struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

// Every certificate in the PEM file `path`; an error naming the file when it cannot be read or
// holds none.
Result<std::vector<X509Ptr>> ReadCertificates(const std::string& path, const std::string& what) {
  BIO* bio = BIO_new_file(path.c_str(), "r");
  if (bio == nullptr) return InvalidArgument("cannot read " + what + " " + path + ": " + DrainOpenSslErrors());
  std::vector<X509Ptr> certificates;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) certificates.emplace_back(cert);
  BIO_free(bio);
  ERR_clear_error();  // the end of the file reads as an error
  if (certificates.empty()) return InvalidArgument(what + " " + path + " holds no PEM certificate");
  return certificates;
}

// Adds every CRL in the PEM file `path` to `store` and turns revocation checking on.
Status LoadCrls(X509_STORE* store, const std::string& path) {
  BIO* bio = BIO_new_file(path.c_str(), "r");
  if (bio == nullptr) return InvalidArgument("cannot read the CRL file " + path + ": " + DrainOpenSslErrors());
  int loaded = 0;
  while (X509_CRL* crl = PEM_read_bio_X509_CRL(bio, nullptr, nullptr, nullptr)) {
    const int added = X509_STORE_add_crl(store, crl);
    X509_CRL_free(crl);
    if (added != 1) {
      BIO_free(bio);
      return InvalidArgument("cannot use a CRL of " + path + ": " + DrainOpenSslErrors());
    }
    ++loaded;
  }
  BIO_free(bio);
  ERR_clear_error();
  if (loaded == 0) return InvalidArgument("the CRL file " + path + " holds no PEM CRL (X509 CRL)");
  // The client's own certificate is checked against its issuer's CRL; a CA that must go is taken
  // out of client_ca instead. No CRL for the issuer, or one past its next update, refuses.
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
  return Status::Ok();
}

// The refusal for a failed certificate verification (X509_V_ERR_*).
TlsRefusal VerifyRefusal(long verify) {
  switch (verify) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return TlsRefusal::kExpiredCertificate;
    case X509_V_ERR_CERT_REVOKED:
    case X509_V_ERR_UNABLE_TO_GET_CRL:
    case X509_V_ERR_CRL_HAS_EXPIRED:
    case X509_V_ERR_CRL_NOT_YET_VALID:
    case X509_V_ERR_CRL_SIGNATURE_FAILURE:
    case X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE:
      return TlsRefusal::kRevokedCertificate;
    default:
      return TlsRefusal::kUntrustedCertificate;
  }
}

std::string Join(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

// Letters, digits, '-', '.', '_' and a leading "*." (a wildcard, never on an allowlist).
bool IsHostName(const std::string& name) {
  return !name.empty() &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._*") ==
             std::string::npos;
}

// Whether `identity` is `entry`, or lies under it when `entry` is a URI prefix (ends in '/').
bool NamedBy(const std::string& entry, const std::string& identity) {
  if (!entry.empty() && entry.back() == '/') return identity.size() > entry.size() && identity.rfind(entry, 0) == 0;
  return identity == entry;
}

}  // namespace

// The CAs one TlsIssuerBinding names, loaded.
struct TlsServerContext::Issuer {
  std::vector<X509Ptr> cas;
  std::vector<std::string> identities;
};

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
    case TlsRefusal::kWrongIssuer:
      return "wrong_issuer";
    case TlsRefusal::kRevokedCertificate:
      return "revoked_certificate";
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
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0 && !IsKubernetesSecretOfOurGroup(info)) {
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
  context->llm_api_clients_ = {config.llm_api_clients.begin(), config.llm_api_clients.end()};
  context->card_token_clients_ = {config.card_token_clients.begin(), config.card_token_clients.end()};
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Internal("cannot create a TLS context: " + DrainOpenSslErrors());
  context->ctx_ = ctx;
  const auto failed = [](const std::string& what) { return InvalidArgument(what + ": " + DrainOpenSslErrors()); };
  SSL_CTX_set_min_proto_version(ctx, config.min_version == TlsVersion::k1_3 ? TLS1_3_VERSION : TLS1_2_VERSION);
  // Security level 2 (keys of at least 112 bits' strength, no SHA-1 signatures), set here rather
  // than left to the distribution's openssl.cnf, which may lower it.
  SSL_CTX_set_security_level(ctx, 2);
  std::string groups;
  for (const std::string& group : config.groups) groups += (groups.empty() ? "" : ":") + group;
  if (SSL_CTX_set1_groups_list(ctx, groups.c_str()) != 1) return failed("cannot set the key-exchange groups " + groups);
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
  if (!config.crl_file.empty()) TXSCORE_RETURN_IF_ERROR(LoadCrls(SSL_CTX_get_cert_store(ctx), config.crl_file));
  for (const TlsIssuerBinding& binding : config.issuers) {
    TXSCORE_ASSIGN_OR_RETURN(std::vector<X509Ptr> cas, ReadCertificates(binding.ca, "the issuer CA file"));
    for (const X509Ptr& ca : cas) {
      if (X509_check_ca(ca.get()) == 0) {
        return InvalidArgument("the issuer CA file " + binding.ca + " holds a certificate that is not a CA's");
      }
    }
    context->issuers_.push_back({std::move(cas), binding.identities});
  }
  // Every client must present a certificate that chains to client_ca; Admit then checks its names.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_verify_depth(ctx, 4);
  return std::shared_ptr<const TlsServerContext>(std::move(context));
}

TlsServerContext::TlsServerContext() = default;

TlsServerContext::~TlsServerContext() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

ssl_st* TlsServerContext::NewConnection() const { return SSL_new(ctx_); }

std::vector<std::string> CertificateIdentities(X509* cert, const IdentityRules& rules) {
  std::vector<std::string> names;
  if (cert == nullptr) return names;
  const auto prefixed = [&rules](const std::string& uri) {
    return std::any_of(rules.uri_prefixes.begin(), rules.uri_prefixes.end(),
                       [&uri](const std::string& prefix) { return NamedBy(prefix, uri); });
  };
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  const bool has_san = sans != nullptr;
  if (sans != nullptr) {
    for (int pass = 0; pass < 2; ++pass) {  // DNS names first, then URIs
      for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
        const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
        if (pass == 0 && name->type == GEN_DNS) {
          // A DNS name is a host name: "spiffe://bank.example/ops" as a DNS SAN is nobody (a CA
          // constrained to URIs does not bind DNS names), as a URI SAN "txscore-admin" is.
          std::string host = Utf8(name->d.dNSName);
          if (IsHostName(host)) names.push_back(std::move(host));
        }
        if (pass == 1 && name->type == GEN_URI) {
          // A URI names someone only under a configured prefix: "txscore-admin" as a URI is not
          // the DNS name txscore-admin, and a CA constrained to DNS names does not bind URIs.
          std::string uri = Utf8(name->d.uniformResourceIdentifier);
          if (prefixed(uri)) names.push_back(std::move(uri));
        }
      }
    }
    GENERAL_NAMES_free(sans);
  }
  // The CN only when the settings allow it and the certificate has no subjectAltName at all
  // (stricter than RFC 6125, which ignores IP SANs): a CA's name constraints bind SANs, and
  // OpenSSL checks a CN against them only when it looks like a host name, so a constrained
  // sub-CA could otherwise issue "CN=txscore-admin" beside an IP address.
  const X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (rules.cn_identity && !has_san && index >= 0) {
    names.push_back(Utf8(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index))));
  }
  // Each name once, in order; a name with an embedded NUL (empty here) names nobody.
  std::vector<std::string> unique;
  for (std::string& name : names) {
    if (!name.empty() && std::find(unique.begin(), unique.end(), name) == unique.end())
      unique.push_back(std::move(name));
  }
  return unique;
}

Admission TlsServerContext::Admit(ssl_st* ssl, TlsPort port, const std::string& address) const {
  if (SSL_get0_peer_certificate(ssl) == nullptr || SSL_get_verify_result(ssl) != X509_V_OK ||
      SSL_get0_verified_chain(ssl) == nullptr) {
    // Cannot happen with SSL_VERIFY_FAIL_IF_NO_PEER_CERT; refuse rather than assume.
    Admission refused;
    refused.refusal = TlsRefusal::kNoCertificate;
    refused.detail = "no verified client certificate";
    return refused;
  }
  return AdmitChain(SSL_get0_verified_chain(ssl), port, address);
}

Admission TlsServerContext::Readmit(ssl_st* ssl, TlsPort port, const std::string& address) const {
  X509* leaf = SSL_get0_peer_certificate(ssl);
  if (leaf == nullptr) {
    Admission refused;
    refused.refusal = TlsRefusal::kNoCertificate;
    refused.detail = "no client certificate";
    return refused;
  }
  X509_STORE_CTX* verify = X509_STORE_CTX_new();
  if (verify == nullptr ||
      X509_STORE_CTX_init(verify, SSL_CTX_get_cert_store(ctx_), leaf, SSL_get_peer_cert_chain(ssl)) != 1) {
    X509_STORE_CTX_free(verify);
    Admission refused;
    refused.detail = "cannot verify the certificate again: " + DrainOpenSslErrors();
    return refused;
  }
  // As the handshake verifies: a client's purpose, the same depth and security level.
  X509_STORE_CTX_set_default(verify, "ssl_client");
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(verify);
  X509_VERIFY_PARAM_set_depth(param, SSL_CTX_get_verify_depth(ctx_));
  X509_VERIFY_PARAM_set_auth_level(param, SSL_CTX_get_security_level(ctx_));
  Admission admission;
  if (X509_verify_cert(verify) != 1) {
    const int error = X509_STORE_CTX_get_error(verify);
    admission.refusal = VerifyRefusal(error);
    admission.detail = X509_verify_cert_error_string(error);
  } else {
    admission = AdmitChain(X509_STORE_CTX_get0_chain(verify), port, address);
  }
  X509_STORE_CTX_free(verify);
  ERR_clear_error();
  return admission;
}

Admission TlsServerContext::AdmitChain(STACK_OF(X509) * chain, TlsPort port, const std::string& address) const {
  Admission admission;
  admission.caller.address = address;
  X509* leaf = sk_X509_num(chain) > 0 ? sk_X509_value(chain, 0) : nullptr;
  if (leaf == nullptr) {
    admission.refusal = TlsRefusal::kNoCertificate;
    admission.detail = "no verified client certificate";
    return admission;
  }
  if (X509_check_ca(leaf) != 0) {
    admission.refusal = TlsRefusal::kUntrustedCertificate;
    admission.detail = "a CA certificate is not a client certificate";
    return admission;
  }
  // Whether the certificate's own issuer (the chain's second certificate: not any CA above it,
  // so a sub-CA under a bound root cannot mint the root's identities) is one `name` is bound to,
  // when it is bound at all.
  X509* const issuer_certificate = sk_X509_num(chain) > 1 ? sk_X509_value(chain, 1) : nullptr;
  const auto issued_by_its_ca = [&](const std::string& name) {
    bool bound = false;
    for (const Issuer& issuer : issuers_) {
      if (std::none_of(issuer.identities.begin(), issuer.identities.end(),
                       [&name](const std::string& entry) { return NamedBy(entry, name); })) {
        continue;
      }
      bound = true;
      for (const X509Ptr& ca : issuer.cas) {
        if (issuer_certificate != nullptr && X509_cmp(issuer_certificate, ca.get()) == 0) return true;
      }
    }
    return !bound;
  };
  const std::set<std::string>& allowed = port == TlsPort::kThrift ? thrift_clients_ : admin_clients_;
  const std::vector<std::string> names =
      CertificateIdentities(leaf, {config_.uri_identity_prefixes, config_.cn_identity});
  std::vector<std::string> wrong_issuer;
  // The caller's rights are those of every name of its certificate the port admits; the
  // identity it is known by is an operator's name where it has one, so one certificate can
  // carry both a service name and an operator role.
  for (const std::string& name : names) {
    if (allowed.count(name) == 0) continue;
    if (!issued_by_its_ca(name)) {
      wrong_issuer.push_back(name);
      continue;
    }
    const bool operator_name = operators_.count(name) != 0;
    if (!admission.admitted || (operator_name && !admission.caller.is_operator)) admission.caller.identity = name;
    admission.admitted = true;
    admission.caller.is_operator |= operator_name;
    admission.caller.may_use_llm_api |= llm_api_clients_.count(name) != 0;
    admission.caller.may_send_card_tokens |= card_token_clients_.count(name) != 0;
  }
  if (admission.admitted) return admission;
  if (!wrong_issuer.empty()) {
    admission.refusal = TlsRefusal::kWrongIssuer;
    admission.detail =
        "the certificate names " + Join(wrong_issuer) + ", bound (security.tls.issuers) to a CA that did not issue it";
    return admission;
  }
  admission.refusal = TlsRefusal::kIdentityNotAllowed;
  admission.detail = "the certificate names " + (names.empty() ? std::string("nobody") : Join(names)) +
                     ", none of them allowed on the " + TlsPortName(port) + " port";
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
  } else if (verify != X509_V_OK) {
    refused.refusal = VerifyRefusal(verify);
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

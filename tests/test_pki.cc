#include "tests/test_pki.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "tests/test_support.h"

namespace txscore::testing {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertDeleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test PKI: ") + what);
}

Key NewKey() {
  Key key(EVP_EC_gen("P-256"));
  Check(key != nullptr, "EC key generation");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  Check(ext != nullptr, "extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`, valid from `from_days` to `to_days` around now, signed by
// (issuer, issuer_key), or self-signed when issuer is null (a CA).
enum class Kind {
  kLeaf,              // a client's or server's certificate, named by `san`
  kConstrainedSubCa,  // a CA signed by the issuer, whose name constraints are `san`
  kClientCa,          // a CA that may also sign a TLS client's handshake, named by `san`
};
Cert Issue(EVP_PKEY* key, const std::string& cn, const std::string& san, bool server, X509* issuer,
           EVP_PKEY* issuer_key, long from_days, long to_days, Kind kind = Kind::kLeaf) {
  static long serial = 1;
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_days * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), to_days * 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (kind == Kind::kClientCa) {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature,keyCertSign");
    AddExtension(cert.get(), signer, NID_ext_key_usage, "clientAuth");
    AddExtension(cert.get(), signer, NID_subject_alt_name, san);
  } else if (issuer == nullptr || kind == Kind::kConstrainedSubCa) {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
    if (kind == Kind::kConstrainedSubCa) AddExtension(cert.get(), signer, NID_name_constraints, "critical," + san);
  } else {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert.get(), signer, NID_ext_key_usage, server ? "serverAuth" : "clientAuth");
    if (!san.empty()) AddExtension(cert.get(), signer, NID_subject_alt_name, san);
  }
  AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  Check(X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) > 0, "signing");
  return cert;
}

// Replaces `cert`'s names by one SAN DNS name that holds a NUL byte, and signs it again.
void SetSanWithNul(X509* cert, EVP_PKEY* issuer_key, const std::string& name) {
  GENERAL_NAMES* names = GENERAL_NAMES_new();
  GENERAL_NAME* entry = GENERAL_NAME_new();
  ASN1_IA5STRING* text = ASN1_IA5STRING_new();
  Check(ASN1_STRING_set(text, name.data(), static_cast<int>(name.size())) == 1, "a SAN with a NUL");
  GENERAL_NAME_set0_value(entry, GEN_DNS, text);
  sk_GENERAL_NAME_push(names, entry);
  Check(X509_add1_ext_i2d(cert, NID_subject_alt_name, names, 0, X509V3_ADD_REPLACE) == 1, "a SAN with a NUL");
  GENERAL_NAMES_free(names);
  Check(X509_sign(cert, issuer_key, EVP_sha256()) > 0, "signing");
}

void WritePem(const std::string& path, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr && PEM_write_X509(f, cert) == 1, "writing a certificate");
  std::fclose(f);
}

void WritePem(const std::string& path, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr && PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1, "writing a key");
  std::fclose(f);
  ::chmod(path.c_str(), 0600);
}

void AppendPem(const std::string& path, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "a");
  Check(f != nullptr && PEM_write_X509(f, cert) == 1, "appending a certificate");
  std::fclose(f);
}

// A CRL of (ca, ca_key) issued `from_days` around now, its next update `to_days` around now
// (30 days on: current; -1: past its next update), revoking `revoked` (may be null).
void WriteCrl(const std::string& path, X509* ca, EVP_PKEY* ca_key, X509* revoked, int from_days = -1,
              int to_days = 30) {
  X509_CRL* crl = X509_CRL_new();
  X509_CRL_set_version(crl, 1);
  X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca));
  ASN1_TIME* now = ASN1_TIME_adj(nullptr, std::time(nullptr), from_days, 0);
  ASN1_TIME* next = ASN1_TIME_adj(nullptr, std::time(nullptr), to_days, 0);
  X509_CRL_set1_lastUpdate(crl, now);
  X509_CRL_set1_nextUpdate(crl, next);
  if (revoked != nullptr) {
    X509_REVOKED* entry = X509_REVOKED_new();
    X509_REVOKED_set_serialNumber(entry, X509_get_serialNumber(revoked));
    X509_REVOKED_set_revocationDate(entry, now);
    X509_CRL_add0_revoked(crl, entry);
  }
  X509_CRL_sort(crl);
  Check(X509_CRL_sign(crl, ca_key, EVP_sha256()) > 0, "signing a CRL");
  FILE* f = std::fopen(path.c_str(), "w");
  Check(f != nullptr && PEM_write_X509_CRL(f, crl) == 1, "writing a CRL");
  std::fclose(f);
  ASN1_TIME_free(now);
  ASN1_TIME_free(next);
  X509_CRL_free(crl);
}

// DIR/NAME/{ca.crt, tls.crt, tls.key}: a client (or server) certificate and the CA to trust;
// `chain` (when given) follows the certificate in tls.crt.
std::string WriteIdentity(const std::string& dir, const std::string& name, X509* trust, X509* cert, EVP_PKEY* key,
                          X509* chain = nullptr) {
  const std::string out = dir + "/" + name;
  std::filesystem::create_directories(out);
  WritePem(out + "/ca.crt", trust);
  WritePem(out + "/tls.crt", cert);
  if (chain != nullptr) AppendPem(out + "/tls.crt", chain);
  WritePem(out + "/tls.key", key);
  return out;
}

TestPki Make(const std::string& dir) {
  TestPki pki;
  pki.dir = dir;
  Key ca_key = NewKey();
  Cert ca = Issue(ca_key.get(), "txscore test CA", "", false, nullptr, nullptr, -1, 30);
  Key rogue_ca_key = NewKey();
  Cert rogue_ca = Issue(rogue_ca_key.get(), "txscore test CA", "", false, nullptr, nullptr, -1, 30);
  pki.ca_certificate = dir + "/ca.crt";
  WritePem(pki.ca_certificate, ca.get());

  Key server_key = NewKey();
  Cert server =
      Issue(server_key.get(), "txscore-server", "DNS:localhost,IP:127.0.0.1", true, ca.get(), ca_key.get(), -1, 30);
  const std::string server_dir = WriteIdentity(dir, "server", ca.get(), server.get(), server_key.get());
  pki.server_certificate = server_dir + "/tls.crt";
  pki.server_key = server_dir + "/tls.key";
  Key other_server_key = NewKey();
  Cert other_server = Issue(other_server_key.get(), "txscore-server", "DNS:localhost,IP:127.0.0.1", true,
                            rogue_ca.get(), rogue_ca_key.get(), -1, 30);
  pki.other_server_dir = WriteIdentity(dir, "other-server", rogue_ca.get(), other_server.get(), other_server_key.get());
  Key localhost_key = NewKey();
  Cert localhost_only =
      Issue(localhost_key.get(), "txscore-server", "DNS:localhost", true, ca.get(), ca_key.get(), -1, 30);
  pki.localhost_only_server_dir =
      WriteIdentity(dir, "localhost-only-server", ca.get(), localhost_only.get(), localhost_key.get());

  const auto client = [&](const std::string& name, const std::string& cn, const std::string& san, X509* issuer,
                          EVP_PKEY* issuer_key, long from, long to) {
    Key key = NewKey();
    Cert cert = Issue(key.get(), cn, san, false, issuer, issuer_key, from, to);
    return WriteIdentity(dir, name, ca.get(), cert.get(), key.get());
  };
  pki.client_dir = client("client", "txscore-client", "DNS:txscore-client", ca.get(), ca_key.get(), -1, 30);
  pki.admin_dir = client("admin", "txscore-admin", "DNS:txscore-admin", ca.get(), ca_key.get(), -1, 30);
  pki.stranger_dir = client("stranger", "txscore-stranger", "DNS:txscore-stranger", ca.get(), ca_key.get(), -1, 30);
  pki.expired_dir = client("expired", "txscore-client", "DNS:txscore-client", ca.get(), ca_key.get(), -30, -1);
  pki.rogue_dir = client("rogue", "txscore-client", "DNS:txscore-client", rogue_ca.get(), rogue_ca_key.get(), -1, 30);
  pki.uri_dir = client("uri", "someone-else", "URI:spiffe://txscore.test/client", ca.get(), ca_key.get(), -1, 30);
  pki.longer_name_dir =
      client("longer-name", "txscore-client-x", "DNS:txscore-client-x", ca.get(), ca_key.get(), -1, 30);
  pki.shorter_name_dir = client("shorter-name", "txscore-clien", "DNS:txscore-clien", ca.get(), ca_key.get(), -1, 30);
  {
    Key key = NewKey();
    Cert cert = Issue(key.get(), "someone", "DNS:placeholder", false, ca.get(), ca_key.get(), -1, 30);
    SetSanWithNul(cert.get(), ca_key.get(), std::string("txscore-admin\0.evil.example", 27));
    pki.nul_name_dir = WriteIdentity(dir, "nul-name", ca.get(), cert.get(), key.get());
  }
  pki.dns_uri_dir = client("dns-uri", "someone", "DNS:spiffe://txscore.test/client", ca.get(), ca_key.get(), -1, 30);
  pki.cn_behind_san_dir = client("cn-behind-san", "txscore-admin", "DNS:someone-else", ca.get(), ca_key.get(), -1, 30);
  pki.ca_as_client_dir = WriteIdentity(dir, "ca-as-client", ca.get(), ca.get(), ca_key.get());
  {
    Key key = NewKey();
    Cert cert = Issue(key.get(), "txscore-client", "DNS:txscore-client", false, ca.get(), ca_key.get(), -1, 30,
                      Kind::kClientCa);
    pki.client_ca_as_client_dir = WriteIdentity(dir, "client-ca-as-client", ca.get(), cert.get(), key.get());
  }

  Key partner_ca_key = NewKey();
  Cert partner_ca = Issue(partner_ca_key.get(), "partner CA", "permitted;DNS:.partner.example", false, ca.get(),
                          ca_key.get(), -1, 30, Kind::kConstrainedSubCa);
  pki.partner_ca_certificate = dir + "/partner-ca.crt";
  WritePem(pki.partner_ca_certificate, partner_ca.get());
  const auto partner_client = [&](const std::string& name, const std::string& cn, const std::string& san) {
    Key key = NewKey();
    Cert cert = Issue(key.get(), cn, san, false, partner_ca.get(), partner_ca_key.get(), -1, 30);
    return WriteIdentity(dir, name, ca.get(), cert.get(), key.get(), partner_ca.get());
  };
  pki.partner_dir = partner_client("partner", "svc.partner.example", "DNS:svc.partner.example");
  pki.partner_cn_only_dir = partner_client("partner-cn-only", "txscore-admin", "");
  pki.partner_ip_only_dir = partner_client("partner-ip-only", "txscore-admin", "IP:10.1.2.3");
  pki.partner_uri_only_dir = partner_client("partner-uri-only", "txscore-admin", "URI:txscore-admin");
  pki.partner_outside_dir = partner_client("partner-outside", "txscore-admin", "DNS:txscore-admin");
  pki.partner_spiffe_dir = partner_client("partner-spiffe", "someone", "URI:spiffe://txscore.test/client");

  Key enterprise_ca_key = NewKey();
  Cert enterprise_ca = Issue(enterprise_ca_key.get(), "enterprise CA", "", false, nullptr, nullptr, -1, 30);
  pki.enterprise_ca_certificate = dir + "/enterprise-ca.crt";
  WritePem(pki.enterprise_ca_certificate, enterprise_ca.get());
  pki.ca_bundle = dir + "/ca-bundle.crt";
  WritePem(pki.ca_bundle, ca.get());
  AppendPem(pki.ca_bundle, enterprise_ca.get());
  pki.enterprise_admin_dir = client("enterprise-admin", "txscore-admin", "DNS:txscore-admin", enterprise_ca.get(),
                                    enterprise_ca_key.get(), -1, 30);

  Key revoked_key = NewKey();
  Cert revoked =
      Issue(revoked_key.get(), "txscore-client", "DNS:txscore-client", false, ca.get(), ca_key.get(), -1, 30);
  pki.revoked_dir = WriteIdentity(dir, "revoked", ca.get(), revoked.get(), revoked_key.get());
  pki.crl = dir + "/ca.crl";
  WriteCrl(pki.crl, ca.get(), ca_key.get(), revoked.get());
  pki.empty_crl = dir + "/ca-empty.crl";
  WriteCrl(pki.empty_crl, ca.get(), ca_key.get(), nullptr);
  pki.stale_crl = dir + "/ca-stale.crl";
  WriteCrl(pki.stale_crl, ca.get(), ca_key.get(), nullptr, -2, -1);
  WritePem(dir + "/ca.key", ca_key.get());  // for IssueClientValidFor
  return pki;
}

}  // namespace

const TestPki& SharedTestPki() {
  static TempDir* dir = new TempDir();  // removed at exit by the handler below
  static const TestPki pki = [] {
    std::atexit([] { delete dir; });
    return Make(dir->path());
  }();
  return pki;
}

std::string IssueClientValidFor(const std::string& name, long seconds) {
  const TestPki& pki = SharedTestPki();
  FILE* f = std::fopen(pki.ca_certificate.c_str(), "r");
  Check(f != nullptr, "reading the test CA");
  Cert ca(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  f = std::fopen((pki.dir + "/ca.key").c_str(), "r");
  Check(f != nullptr, "reading the test CA's key");
  Key ca_key(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  Check(ca != nullptr && ca_key != nullptr, "the test CA's files");
  Key key = NewKey();
  Cert cert = Issue(key.get(), "txscore-client", "DNS:txscore-client", false, ca.get(), ca_key.get(), -1, 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), seconds);
  Check(X509_sign(cert.get(), ca_key.get(), EVP_sha256()) > 0, "signing");
  return WriteIdentity(pki.dir, name, ca.get(), cert.get(), key.get());
}

std::string TestTlsSettingsYaml() {
  const TestPki& pki = SharedTestPki();
  return "  tls:\n"
         "    certificate: " +
         pki.server_certificate + "\n    private_key: " + pki.server_key + "\n    client_ca: " + pki.ca_certificate +
         "\n"
         "    thrift_clients: [txscore-client, txscore-admin, \"spiffe://txscore.test/client\"]\n"
         "    admin_clients: [txscore-admin, \"spiffe://txscore.test/client\"]\n"
         "    operators: [txscore-admin]\n"
         "    llm_api_clients: [txscore-admin]\n"
         "    uri_identity_prefixes: [\"spiffe://txscore.test/\"]\n";
}

}  // namespace txscore::testing

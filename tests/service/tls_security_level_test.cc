// The TLS context pins OpenSSL's security level 2 whatever the distribution's configuration says.
// CTest runs this binary with OPENSSL_CONF naming tests/service/openssl-seclevel0.cnf, whose
// default level is 0 (tests/CMakeLists.txt): under Debian's own file the default is already 2,
// and a test there could not see the pin removed.
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include "service/tls.h"
#include "tests/test_pki.h"

namespace txscore::service {
namespace {

TEST(TlsSecurityLevel, IsTwoWhateverTheConfiguredDefault) {
  SSL_CTX* plain = SSL_CTX_new(TLS_server_method());
  ASSERT_NE(plain, nullptr);
  const int default_level = SSL_CTX_get_security_level(plain);
  SSL_CTX_free(plain);
  ASSERT_EQ(default_level, 0) << "run with OPENSSL_CONF=tests/service/openssl-seclevel0.cnf, as ctest does";
  const testing::TestPki& pki = testing::SharedTestPki();
  TlsConfig config;
  config.certificate = pki.server_certificate;
  config.private_key = pki.server_key;
  config.client_ca = pki.ca_certificate;
  Result<std::shared_ptr<const TlsServerContext>> context = TlsServerContext::Create(config);
  ASSERT_TRUE(context.ok()) << context.error().ToString();
  EXPECT_EQ(SSL_CTX_get_security_level((*context)->native()), 2);
}

}  // namespace
}  // namespace txscore::service

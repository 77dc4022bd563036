#include "service/commands/client_tls.h"

#include <cstdlib>
#include <filesystem>

namespace txscore::service {

void AddClientTlsFlags(CLI::App* cmd, ClientTlsFlags* flags, const std::string& default_dir) {
  const char* from_env = std::getenv("TXSCORE_TLS_DIR");
  flags->tls_dir = from_env != nullptr && *from_env != '\0' ? from_env : default_dir;
  cmd->add_option("--tls-dir", flags->tls_dir,
                  "Client certificate directory: ca.crt, tls.crt, tls.key (default: $TXSCORE_TLS_DIR, else this)")
      ->capture_default_str();
  cmd->add_flag("--plaintext", flags->plaintext, "Connect without TLS (a server whose settings say server.plaintext)");
}

Result<TlsClientFiles> ResolveClientTls(const ClientTlsFlags& flags) {
  if (flags.plaintext) return TlsClientFiles{};
  const TlsClientFiles files = TlsClientFilesIn(flags.tls_dir);
  for (const std::string& file : {files.ca, files.certificate, files.private_key}) {
    if (!std::filesystem::is_regular_file(file)) {
      return InvalidArgument("no client certificate: " + file +
                             " does not exist. Give --tls-dir DIR holding ca.crt, tls.crt and tls.key "
                             "(scripts/make-demo-pki.sh makes var/pki/client and var/pki/admin), or --plaintext for a "
                             "server whose settings say server.plaintext: true");
    }
  }
  return files;
}

}  // namespace txscore::service

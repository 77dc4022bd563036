#include "service/commands/client_tls.h"

#include <thrift/transport/TTransportException.h>

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

std::string ConnectionFailureHint(const ClientTlsFlags& flags, const std::exception& failure) {
  const auto* transport = dynamic_cast<const apache::thrift::transport::TTransportException*>(&failure);
  if (transport == nullptr) return "";  // an answer from the server (an error it reported), not the connection
  if (flags.plaintext) {
    // A TLS port reads a plaintext request as a broken handshake and closes: the client sees
    // the end of the stream where the answer should be.
    if (transport->getType() != apache::thrift::transport::TTransportException::END_OF_FILE) return "";
    return "The server closed the connection: its Thrift port uses TLS unless its settings say server.plaintext: "
           "true. Drop --plaintext (the client certificate comes from --tls-dir).\n";
  }
  return "If the server refused the TLS client: its log says why (its security.tls.thrift_clients must name this "
         "certificate's identity).\n";
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

// --tls-dir and --plaintext, for the commands that connect to a server's Thrift port
// (txscore score, txscore job).
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <string>

#include "common/result.h"
#include "service/tls.h"

namespace txscore::service {

struct ClientTlsFlags {
  std::string tls_dir;     // ca.crt, tls.crt, tls.key (a Kubernetes TLS secret's names)
  bool plaintext = false;  // for a server whose settings say server.plaintext: true
};

// Adds the flags; --tls-dir defaults to $TXSCORE_TLS_DIR, else `default_dir` (relative to the
// current directory: the demo's var/pki/client or var/pki/admin).
void AddClientTlsFlags(CLI::App* cmd, ClientTlsFlags* flags, const std::string& default_dir);

// The files to present (none with --plaintext), or an error saying what to give.
Result<TlsClientFiles> ResolveClientTls(const ClientTlsFlags& flags);

// What to print (a line, or several) after a connection failed while calling the server: a
// TLS server closes a plaintext connection without a word ("No more data to read"), and refuses
// a certificate it does not know, saying why only in its own log.
// `failure` is what the call threw.
std::string ConnectionFailureHint(const ClientTlsFlags& flags, const std::exception& failure);

}  // namespace txscore::service

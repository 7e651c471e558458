// Connections between a node and device hosts on other machines
// (docs/device-hosts.md, "Nodes on other machines"): the runtime config's
// `network` section, compiled and checked before an actor system is made.
// CAF's TLS module reads the certificate files only at the first
// connection, and a file it cannot read there ends the process; so every
// file is read and checked here first, and a bad one is refused in words.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/cohort.pb.h"

namespace cohort {

/// Where a remote device host listens.
struct endpoint {
  std::string host;
  uint16_t port = 0;
};

/// "HOST:PORT" ("[IPv6]:PORT" for an IPv6 address).
std::string to_string(const endpoint& e);

/// "HOST:PORT" or "[IPv6]:PORT" as an endpoint; malformed_config (naming
/// `what`) for anything else, a port outside 1..65535 included (port 0,
/// any free port, too when `any_port`).
caf::expected<endpoint> parse_endpoint(const std::string& text,
                                       const std::string& what,
                                       bool any_port = false);

/// The `network` section, checked.
struct network_settings {
  /// Mutual TLS through CAF's libcaf_openssl: this side's certificate and
  /// key (PEM), the key's passphrase (read from its file), and whom to
  /// trust (a CA file, a folder of hashed CA certificates, or both). Empty
  /// certificate: no TLS.
  std::string certificate;
  std::string key;
  std::string passphrase;
  std::string cafile;
  std::string capath;
  /// The token the fleet's nodes and remote hosts share (empty: none).
  std::string token;
  /// Remote device hosts whose devices join the fleet.
  std::vector<endpoint> join;
  /// How long a connection to a remote host and its greeting may take.
  std::chrono::milliseconds connect_timeout{10000};

  bool tls() const { return !certificate.empty(); }
};

/// Compiles and checks `cfg.network()`: the TLS files are read and parsed
/// (the certificate, whose extended key usage must allow both TLS server
/// and client when it names any; the key, with its passphrase; the key
/// must be the certificate's; at least one CA certificate), the token file
/// is read (its first line, 16 to 4096 characters), and every join address
/// is parsed. TLS is all or nothing: a certificate without a key or a CA is
/// refused, and so is joining a remote host without TLS and a token.
/// Errors: malformed_config, naming the field and the problem.
caf::expected<network_settings> compile_network(const pb::RuntimeConfig& cfg);

} // namespace cohort

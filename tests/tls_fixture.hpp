// Test certificates for mutual TLS between nodes and remote device hosts
// (docs/device-hosts.md), made with the openssl command (deps/apt.txt) in a
// temporary folder: a CA, certificates it signs for TLS server and client
// use ("node", "host"), one it signs for server use only ("serveronly"),
// one signed by a second CA the others do not trust ("stranger"), one
// signed by an intermediate CA ("chained"; chained-full.pem holds the
// intermediate after it), node's
// key encrypted with a passphrase, and a token file.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

#include "messages/cohort.pb.h"
#include "tests/runtime_fixture.hpp"

namespace cohort::test {

struct tls_files {
  temp_dir dir;
  /// False when the openssl command failed (the tests that need the files
  /// are skipped with a message then).
  bool ok = false;

  tls_files() {
    auto d = dir.path.string();
    std::string ca_cmd = " -x509 -newkey ec -pkeyopt "
                         "ec_paramgen_curve:prime256v1 -nodes -days 30 "
                         "-addext basicConstraints=critical,CA:TRUE "
                         "-addext keyUsage=critical,keyCertSign,cRLSign";
    auto leaf = [&](const std::string& name, const std::string& ca,
                    const std::string& ext) {
      return "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout " +
             name + ".key -out " + name + ".csr -subj /CN=" + name +
             " && openssl x509 -req -in " + name + ".csr -CA " + ca +
             ".pem -CAkey " + ca + ".key -CAcreateserial -out " + name +
             ".pem -days 30 -sha256 -extfile " + ext + " && ";
    };
    std::string cmd =
        "cd '" + d + "' && " +
        "openssl req -keyout ca.key -out ca.pem -subj /CN=cohort-test-ca" +
        ca_cmd + " && openssl req -keyout ca2.key -out ca2.pem " +
        "-subj /CN=cohort-other-ca" + ca_cmd + " && " +
        "printf 'basicConstraints=CA:FALSE\\nkeyUsage=critical,"
        "digitalSignature,keyEncipherment\\nextendedKeyUsage=serverAuth,"
        "clientAuth\\n' > both.ext && "
        "printf 'basicConstraints=CA:FALSE\\nkeyUsage=critical,"
        "digitalSignature,keyEncipherment\\nextendedKeyUsage=serverAuth\\n' "
        "> server.ext && " +
        leaf("node", "ca", "both.ext") + leaf("host", "ca", "both.ext") +
        leaf("serveronly", "ca", "server.ext") +
        leaf("stranger", "ca2", "both.ext") +
        // An intermediate CA the first signs, and a certificate it signs,
        // whose file holds its chain.
        "printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,"
        "keyCertSign,cRLSign\n' > ca.ext && " +
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
        "-nodes -keyout mid.key -out mid.csr -subj /CN=mid && openssl x509 "
        "-req -in mid.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out "
        "mid.pem -days 30 -sha256 -extfile ca.ext && " +
        leaf("chained", "mid", "both.ext") +
        "cat chained.pem mid.pem > chained-full.pem && " +
        "openssl pkcs8 -topk8 -in node.key -out node-enc.key "
        "-passout pass:s3cret-phrase && "
        "printf 's3cret-phrase\\n' > passphrase && "
        "printf 'fleet-token-0123456789abcdef\\n' > token && "
        "printf 'short\\n' > short-token";
    ok = std::system(("(" + cmd + ") > /dev/null 2>&1").c_str()) == 0;
  }

  std::string file(const std::string& name) const { return dir.file(name); }

  /// The network section of a side named `who` ("node", "host",
  /// "stranger"), trusting the first CA, with the shared token.
  pb::NetworkConfig network(const std::string& who) const {
    pb::NetworkConfig n;
    n.set_certificate(file(who + ".pem"));
    n.set_key(file(who + ".key"));
    n.set_cafile(file("ca.pem"));
    n.set_token_file(file("token"));
    return n;
  }
};

} // namespace cohort::test

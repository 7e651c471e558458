// The network section (docs/device-hosts.md, "Nodes on other machines"):
// every TLS file is read and checked before CAF sees it, and each problem
// is refused in words naming its field.
#include <catch2/catch.hpp>

#include "messages/errc.hpp"
#include "messages/network.hpp"
#include "tests/tls_fixture.hpp"

using namespace cohort;

namespace {

// The reason compile_network gives for `n`; empty when it compiles.
std::string refusal(const pb::NetworkConfig& n) {
  pb::RuntimeConfig cfg;
  *cfg.mutable_network() = n;
  auto out = compile_network(cfg);
  if (out)
    return {};
  CHECK(code_of(out.error()) == errc::malformed_config);
  return describe(out.error());
}

} // namespace

TEST_CASE("join addresses are HOST:PORT", "[config][network]") {
  auto e = parse_endpoint("gpu-7.example:9471", "x");
  REQUIRE(e);
  CHECK(e->host == "gpu-7.example");
  CHECK(e->port == 9471);
  auto v6 = parse_endpoint("[::1]:80", "x");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 80);
  CHECK(parse_endpoint("127.0.0.1:0", "x", true));
  for (auto bad : {"", "host", ":9471", "host:", "host:0", "host:65536",
                   "host:12a", "a:b:c", "[::1]80", "[::1]:"}) {
    INFO(bad);
    auto r = parse_endpoint(bad, "network.join");
    REQUIRE_FALSE(r);
    CHECK_THAT(describe(r.error()), Catch::Contains("network.join"));
  }
}

TEST_CASE("the network section's TLS files are checked before use",
          "[config][network]") {
  test::tls_files tls;
  if (!tls.ok) {
    WARN("SKIPPED: the openssl command could not make test certificates");
    return;
  }
  auto good = tls.network("node");
  CHECK(refusal(good).empty());
  {
    pb::RuntimeConfig cfg;
    *cfg.mutable_network() = good;
    cfg.mutable_network()->add_join("10.1.2.3:9471");
    auto net = compile_network(cfg);
    REQUIRE(net);
    CHECK(net->tls());
    CHECK(net->token == "fleet-token-0123456789abcdef");
    REQUIRE(net->join.size() == 1);
    CHECK(net->join[0].port == 9471);
    CHECK(net->connect_timeout == std::chrono::milliseconds{10000});
  }
  SECTION("a file that is not there") {
    auto n = good;
    n.set_certificate(tls.file("missing.pem"));
    CHECK_THAT(refusal(n), Catch::Contains("network.certificate: cannot read"));
  }
  SECTION("a certificate without its key") {
    auto n = good;
    n.clear_key();
    CHECK_THAT(refusal(n), Catch::Contains("needs both network.certificate "
                                           "and network.key"));
  }
  SECTION("a file that holds no certificate") {
    auto n = good;
    n.set_certificate(tls.file("token"));
    CHECK_THAT(refusal(n), Catch::Contains("holds no PEM certificate"));
  }
  SECTION("another certificate's key") {
    auto n = good;
    n.set_key(tls.file("host.key"));
    CHECK_THAT(refusal(n), Catch::Contains("is not the key of the "
                                           "certificate"));
  }
  SECTION("a certificate for server use only") {
    auto n = good;
    n.set_certificate(tls.file("serveronly.pem"));
    n.set_key(tls.file("serveronly.key"));
    CHECK_THAT(refusal(n), Catch::Contains("serverAuth and clientAuth"));
  }
  SECTION("a certificate its CA did not sign") {
    auto n = good;
    n.set_certificate(tls.file("stranger.pem"));
    n.set_key(tls.file("stranger.key"));
    CHECK_THAT(refusal(n),
               Catch::Contains("does not verify against the CA it trusts"));
  }
  SECTION("a certificate signed by an intermediate CA, with its chain") {
    auto n = good;
    n.set_certificate(tls.file("chained-full.pem"));
    n.set_key(tls.file("chained.key"));
    CHECK(refusal(n).empty());
    // Without the intermediate, it does not reach the CA.
    n.set_certificate(tls.file("chained.pem"));
    CHECK_THAT(refusal(n),
               Catch::Contains("does not verify against the CA it trusts"));
  }
  SECTION("no CA") {
    auto n = good;
    n.clear_cafile();
    CHECK_THAT(refusal(n), Catch::Contains("TLS needs whom to trust"));
  }
  SECTION("a CA path that is no folder") {
    auto n = good;
    n.set_capath(tls.file("ca.pem"));
    CHECK_THAT(refusal(n), Catch::Contains("network.capath"));
  }
  SECTION("an encrypted key, with and without its passphrase") {
    auto n = good;
    n.set_key(tls.file("node-enc.key"));
    CHECK_THAT(refusal(n), Catch::Contains("needs network.passphrase_file"));
    n.set_passphrase_file(tls.file("passphrase"));
    CHECK(refusal(n).empty());
    n.set_passphrase_file(tls.file("token"));
    CHECK_THAT(refusal(n), Catch::Contains("with the passphrase given"));
  }
  SECTION("a token too short, or a token file that is not there") {
    auto n = good;
    n.set_token_file(tls.file("short-token"));
    CHECK_THAT(refusal(n), Catch::Contains("not 16 to 4096"));
    n.set_token_file(tls.file("nope"));
    CHECK_THAT(refusal(n), Catch::Contains("network.token_file: cannot read"));
  }
  SECTION("joining needs TLS and the token") {
    pb::NetworkConfig n;
    n.add_join("10.1.2.3:9471");
    CHECK_THAT(refusal(n), Catch::Contains("need TLS"));
    auto t = good;
    t.clear_token_file();
    t.add_join("10.1.2.3:9471");
    CHECK_THAT(refusal(t), Catch::Contains("shared token"));
    auto bad = good;
    bad.add_join("10.1.2.3");
    CHECK_THAT(refusal(bad), Catch::Contains("is not HOST:PORT"));
  }
  SECTION("a timeout beyond an hour") {
    auto n = good;
    n.set_connect_timeout_ms(3'600'001);
    CHECK_THAT(refusal(n), Catch::Contains("at most one hour"));
  }
}

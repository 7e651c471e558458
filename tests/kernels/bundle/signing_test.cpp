// Ed25519 keys, signatures and digests of kernel bundles
// (kernels/bundle/signing.hpp).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/bundle/signing.hpp"
#include "messages/errc.hpp"

using namespace cohort::kernels::bundle;

namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

} // namespace

TEST_CASE("an Ed25519 signature verifies only its message under its key",
          "[kernels][bundle]") {
  auto key = private_key::generate();
  REQUIRE(key);
  auto msg = bytes("manifest: kernels saxpy, haversine");
  auto sig = key->sign(msg);
  CHECK(key->public_key().verify(msg, sig));
  // A changed byte of the message or of the signature.
  auto tampered = msg;
  tampered[3] ^= 1;
  CHECK_FALSE(key->public_key().verify(tampered, sig));
  auto bad_sig = sig;
  bad_sig[10] ^= 0x80;
  CHECK_FALSE(key->public_key().verify(msg, bad_sig));
  // Another key.
  auto other = private_key::generate();
  REQUIRE(other);
  CHECK(other->public_key().id() != key->public_key().id());
  CHECK_FALSE(other->public_key().verify(msg, sig));
  // A signature is deterministic (RFC 8032).
  CHECK(key->sign(msg) == sig);
  // The empty message signs too.
  auto empty = key->sign({});
  CHECK(key->public_key().verify({}, empty));
}

TEST_CASE("keys travel as PEM and keep their id", "[kernels][bundle]") {
  auto key = private_key::generate();
  REQUIRE(key);
  auto priv_pem = key->to_pem();
  auto pub_pem = key->public_key().to_pem();
  CHECK(priv_pem.rfind("-----BEGIN PRIVATE KEY-----", 0) == 0);
  CHECK(pub_pem.rfind("-----BEGIN PUBLIC KEY-----", 0) == 0);
  auto back = private_key::from_pem(priv_pem);
  REQUIRE(back);
  auto pub = public_key::from_pem(pub_pem);
  REQUIRE(pub);
  CHECK(pub->id() == key->public_key().id());
  CHECK(pub->id().size() == 16);
  CHECK(pub->raw() == key->public_key().raw());
  auto msg = bytes("x");
  CHECK(pub->verify(msg, back->sign(msg)));
}

TEST_CASE("what is not an Ed25519 PEM key is refused with a reason",
          "[kernels][bundle]") {
  for (std::string text : {"", "not a key",
                           "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC "
                           "KEY-----\n"}) {
    auto pub = public_key::from_pem(text);
    REQUIRE_FALSE(pub);
    CHECK(pub.error() == cohort::make_error(cohort::errc::invalid_arguments));
    CHECK_FALSE(private_key::from_pem(text));
  }
  // A private key where a public one is expected, and the other way round.
  auto key = private_key::generate();
  REQUIRE(key);
  CHECK_FALSE(public_key::from_pem(key->to_pem()));
  CHECK_FALSE(private_key::from_pem(key->public_key().to_pem()));
}

namespace {

// What `openssl genpkey ARGS` writes; empty without the command.
std::string openssl_key(const std::string& args) {
  auto* p = ::popen(("openssl genpkey " + args + " 2>/dev/null").c_str(), "r");
  if (p == nullptr)
    return {};
  std::string pem;
  char buf[256];
  while (auto n = std::fread(buf, 1, sizeof(buf), p))
    pem.append(buf, n);
  return ::pclose(p) == 0 ? pem : std::string{};
}

} // namespace

TEST_CASE("keys made by the openssl command: Ed25519 signs, EC is refused",
          "[kernels][bundle]") {
  auto pem = openssl_key("-algorithm ed25519");
  if (pem.empty()) {
    WARN("skipped: the openssl command is not available here");
    return;
  }
  auto key = private_key::from_pem(pem);
  REQUIRE(key);
  auto msg = bytes("bundle");
  CHECK(key->public_key().verify(msg, key->sign(msg)));
  auto ec = openssl_key("-algorithm EC -pkeyopt ec_paramgen_curve:P-256");
  REQUIRE_FALSE(ec.empty());
  auto refused = private_key::from_pem(ec);
  REQUIRE_FALSE(refused);
  CHECK(cohort::describe(refused.error()).find("not an Ed25519") !=
        std::string::npos);
}

TEST_CASE("SHA-256 digests and hex", "[kernels][bundle]") {
  // FIPS 180-2's "abc".
  auto d = sha256(bytes("abc"));
  CHECK(to_hex(d) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  digest back{};
  CHECK(from_hex(to_hex(d), back));
  CHECK(back == d);
  CHECK(from_hex(
      "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
      back));
  CHECK(back == d);
  CHECK_FALSE(from_hex("ba78", back)); // too short
  CHECK_FALSE(from_hex(std::string(64, 'g'), back));
  CHECK(to_hex(sha256({})) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

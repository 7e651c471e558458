// The cryptography of kernel bundles (issue 19): Ed25519 keys, signatures
// and SHA-256 digests, through OpenSSL. Keys travel as PEM (PKCS#8 for a
// private key, SubjectPublicKeyInfo for a public one), the forms `openssl
// genpkey -algorithm ed25519` writes and reads; a key is named by its key
// id, the first 8 bytes of the SHA-256 of its raw public key, in hex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

namespace cohort::kernels::bundle {

/// An Ed25519 signature (RFC 8032: 64 bytes).
using signature = std::array<uint8_t, 64>;

/// A SHA-256 digest.
using digest = std::array<uint8_t, 32>;

/// An Ed25519 public key: verifies signatures.
class public_key {
public:
  /// Reads a PEM public key; invalid_arguments when it is not one, or not
  /// an Ed25519 key.
  static caf::expected<public_key> from_pem(std::string_view pem);

  /// Verifies `sig` over `message`.
  bool verify(std::span<const uint8_t> message, const signature& sig) const;

  /// The raw key (32 bytes).
  const std::array<uint8_t, 32>& raw() const { return raw_; }

  /// The first 8 bytes of SHA-256(raw()), in hex: how errors, the audit log
  /// and `cohort kernel` name the key.
  std::string id() const;

  std::string to_pem() const;

private:
  std::array<uint8_t, 32> raw_{};
  std::shared_ptr<void> key_; // EVP_PKEY
  friend class private_key;
};

/// An Ed25519 private key: signs.
class private_key {
public:
  /// A new key from the system's random source.
  static caf::expected<private_key> generate();

  /// Reads a PEM private key; invalid_arguments when it is not one, or not
  /// an Ed25519 key.
  static caf::expected<private_key> from_pem(std::string_view pem);

  signature sign(std::span<const uint8_t> message) const;

  /// Its public half.
  const bundle::public_key& public_key() const { return public_; }

  std::string to_pem() const;

private:
  /// Takes `key` (an EVP_PKEY); invalid_arguments if it is not Ed25519.
  static caf::expected<private_key> adopt(void* key);

  std::shared_ptr<void> key_; // EVP_PKEY
  bundle::public_key public_;
};

/// SHA-256 of `data`.
digest sha256(std::span<const uint8_t> data);

/// Lower-case hex of `bytes`.
std::string to_hex(std::span<const uint8_t> bytes);

/// Reads `n` bytes of hex (either case) into `out`; false for any other
/// length or a character that is not hex.
bool from_hex(std::string_view hex, std::span<uint8_t> out);

} // namespace cohort::kernels::bundle

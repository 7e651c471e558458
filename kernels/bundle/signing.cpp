#include "kernels/bundle/signing.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "messages/errc.hpp"

namespace cohort::kernels::bundle {

namespace {

using bio_ptr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

std::shared_ptr<void> own(EVP_PKEY* k) {
  return std::shared_ptr<void>(
      k, [](void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); });
}

EVP_PKEY* raw_key(const std::shared_ptr<void>& k) {
  return static_cast<EVP_PKEY*>(k.get());
}

// OpenSSL's reason for the last failure, and its queue emptied.
std::string openssl_reason() {
  auto code = ERR_peek_last_error();
  char buf[256] = "no reason given";
  if (code != 0)
    ERR_error_string_n(code, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

bio_ptr read_bio(std::string_view text) {
  return bio_ptr{BIO_new_mem_buf(text.data(), int(text.size())), &BIO_free};
}

std::string drain(BIO* bio) {
  char* data = nullptr;
  auto n = BIO_get_mem_data(bio, &data);
  return std::string(data, size_t(n));
}

// The raw public half of an Ed25519 key; false if `k` is not one.
bool fill_public(EVP_PKEY* k, std::array<uint8_t, 32>& out) {
  if (EVP_PKEY_get_id(k) != EVP_PKEY_ED25519)
    return false;
  size_t len = out.size();
  return EVP_PKEY_get_raw_public_key(k, out.data(), &len) == 1 &&
         len == out.size();
}

} // namespace

caf::expected<public_key> public_key::from_pem(std::string_view pem) {
  auto bio = read_bio(pem);
  EVP_PKEY* k =
      bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (k == nullptr)
    return make_error(errc::invalid_arguments,
                      "not a PEM public key: " + openssl_reason());
  public_key out;
  out.key_ = own(k);
  if (!fill_public(k, out.raw_))
    return make_error(errc::invalid_arguments,
                      "a PEM public key, but not an Ed25519 one");
  return out;
}

bool public_key::verify(std::span<const uint8_t> message,
                        const signature& sig) const {
  if (!key_)
    return false;
  md_ctx_ptr ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  bool ok = ctx &&
            EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr,
                                 raw_key(key_)) == 1 &&
            EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), message.data(),
                             message.size()) == 1;
  ERR_clear_error();
  return ok;
}

std::string public_key::id() const {
  auto d = sha256(raw_);
  return to_hex(std::span<const uint8_t>(d.data(), 8));
}

std::string public_key::to_pem() const {
  bio_ptr bio{BIO_new(BIO_s_mem()), &BIO_free};
  if (!key_ || !bio || PEM_write_bio_PUBKEY(bio.get(), raw_key(key_)) != 1)
    return {};
  return drain(bio.get());
}

caf::expected<private_key> private_key::adopt(void* key) {
  auto* k = static_cast<EVP_PKEY*>(key);
  private_key out;
  out.key_ = own(k);
  out.public_.key_ = out.key_;
  if (!fill_public(k, out.public_.raw_))
    return make_error(errc::invalid_arguments,
                      "a PEM private key, but not an Ed25519 one");
  return out;
}

caf::expected<private_key> private_key::generate() {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (k == nullptr)
    return make_error(errc::io_error,
                      "cannot make an Ed25519 key: " + openssl_reason());
  return adopt(k);
}

caf::expected<private_key> private_key::from_pem(std::string_view pem) {
  auto bio = read_bio(pem);
  EVP_PKEY* k =
      bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
          : nullptr;
  if (k == nullptr)
    return make_error(errc::invalid_arguments,
                      "not a PEM private key: " + openssl_reason());
  return adopt(k);
}

signature private_key::sign(std::span<const uint8_t> message) const {
  signature sig{};
  md_ctx_ptr ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  size_t len = sig.size();
  // Ed25519 signing cannot fail for a valid key and buffer; a failure
  // leaves the signature zero, which no key verifies.
  if (!ctx ||
      EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, raw_key(key_)) !=
          1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &len, message.data(),
                     message.size()) != 1)
    sig.fill(0);
  ERR_clear_error();
  return sig;
}

std::string private_key::to_pem() const {
  bio_ptr bio{BIO_new(BIO_s_mem()), &BIO_free};
  if (!key_ || !bio ||
      PEM_write_bio_PrivateKey(bio.get(), raw_key(key_), nullptr, nullptr, 0,
                               nullptr, nullptr) != 1)
    return {};
  return drain(bio.get());
}

digest sha256(std::span<const uint8_t> data) {
  digest out{};
  unsigned len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xf]);
  }
  return out;
}

bool from_hex(std::string_view hex, std::span<uint8_t> out) {
  if (hex.size() != out.size() * 2)
    return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

} // namespace cohort::kernels::bundle

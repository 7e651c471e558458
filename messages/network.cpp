#include "messages/network.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "messages/errc.hpp"
#include "messages/secret_file.hpp"

namespace cohort {

namespace {

caf::error bad(const std::string& what) {
  return make_error(errc::malformed_config, what);
}

// OpenSSL's last error in words (and its queue emptied).
std::string ssl_reason() {
  auto code = ERR_get_error();
  ERR_clear_error();
  if (code == 0)
    return "no reason given";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

// A regular file of at most `limit` bytes, or why not.
caf::error check_file(const std::string& field, const std::string& path,
                      off_t limit) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return bad(field + ": cannot read '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return bad(field + ": '" + path + "' is not a regular file");
  if (st.st_size > limit)
    return bad(field + ": '" + path + "' has " + std::to_string(st.st_size) +
               " bytes, at most " + std::to_string(limit));
  return caf::none;
}

struct bio_free {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct store_free {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct store_ctx_free {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct chain_free {
  void operator()(STACK_OF(X509) * c) const { sk_X509_pop_free(c, X509_free); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

// Checks the TLS files of `s` (set from the config) as CAF will use them.
caf::error check_tls(const network_settings& s) {
  constexpr off_t pem_limit = 1 << 20;
  if (auto err = check_file("network.certificate", s.certificate, pem_limit))
    return err;
  if (auto err = check_file("network.key", s.key, pem_limit))
    return err;
  ERR_clear_error();
  bio_ptr cb{BIO_new_file(s.certificate.c_str(), "r")};
  x509_ptr cert{cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr)
                   : nullptr};
  if (!cert)
    return bad("network.certificate: '" + s.certificate +
               "' holds no PEM certificate (" + ssl_reason() + ")");
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0)
    return bad("network.certificate: '" + s.certificate + "' has expired");
  // One certificate serves both directions of mutual TLS.
  if ((X509_get_extension_flags(cert.get()) & EXFLAG_XKUSAGE) != 0) {
    auto xku = X509_get_extended_key_usage(cert.get());
    if ((xku & XKU_SSL_SERVER) == 0 || (xku & XKU_SSL_CLIENT) == 0)
      return bad("network.certificate: '" + s.certificate +
                 "' must allow both TLS server and client use (extended key "
                 "usage serverAuth and clientAuth): a node both accepts "
                 "and makes connections with it");
  }
  bio_ptr kb{BIO_new_file(s.key.c_str(), "r")};
  // With no callback, OpenSSL takes the last argument as the passphrase.
  std::unique_ptr<EVP_PKEY, pkey_free> key{
      kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr,
                                   const_cast<char*>(s.passphrase.c_str()))
         : nullptr};
  if (!key)
    return bad("network.key: cannot read a PEM private key from '" + s.key +
               "'" +
               (s.passphrase.empty() ? " (an encrypted key needs "
                                       "network.passphrase_file)"
                                     : " with the passphrase given") +
               " (" + ssl_reason() + ")");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return bad("network.key: '" + s.key +
               "' is not the key of the "
               "certificate '" +
               s.certificate + "'");
  }
  if (s.cafile.empty() && s.capath.empty())
    return bad("network: TLS needs whom to trust: network.cafile (the CA "
               "that signs the fleet's certificates) or network.capath");
  std::unique_ptr<X509_STORE, store_free> store{X509_STORE_new()};
  if (!store)
    return bad("network: out of memory checking the CA");
  if (!s.cafile.empty()) {
    if (auto err = check_file("network.cafile", s.cafile, 16 << 20))
      return err;
    if (X509_STORE_load_file(store.get(), s.cafile.c_str()) != 1)
      return bad("network.cafile: '" + s.cafile +
                 "' holds no PEM CA certificate (" + ssl_reason() + ")");
  }
  if (!s.capath.empty()) {
    struct stat st {};
    if (::stat(s.capath.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return bad("network.capath: '" + s.capath + "' is not a folder");
    if (X509_STORE_load_path(store.get(), s.capath.c_str()) != 1)
      return bad("network.capath: cannot use '" + s.capath + "' (" +
                 ssl_reason() + ")");
  }
  // Its peers trust the same CA: a certificate that does not chain to it
  // fails every handshake. The certificates after the first in its file
  // are its chain (CAF sends the whole file), intermediate CAs included.
  std::unique_ptr<STACK_OF(X509), chain_free> chain{sk_X509_new_null()};
  if (!chain)
    return bad("network: out of memory checking the certificate");
  while (auto* more = PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr))
    if (sk_X509_push(chain.get(), more) == 0) {
      X509_free(more);
      return bad("network: out of memory checking the certificate");
    }
  ERR_clear_error();
  std::unique_ptr<X509_STORE_CTX, store_ctx_free> ctx{X509_STORE_CTX_new()};
  if (!ctx)
    return bad("network: out of memory checking the certificate");
  if (X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), chain.get()) !=
          1 ||
      X509_verify_cert(ctx.get()) != 1) {
    std::string why =
        X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
    ERR_clear_error();
    return bad("network.certificate: '" + s.certificate +
               "' does not verify against the CA it trusts (" + why + ")");
  }
  ERR_clear_error();
  return caf::none;
}

} // namespace

std::string to_string(const endpoint& e) {
  if (e.host.find(':') != std::string::npos)
    return "[" + e.host + "]:" + std::to_string(e.port);
  return e.host + ":" + std::to_string(e.port);
}

caf::expected<endpoint> parse_endpoint(const std::string& text,
                                       const std::string& what, bool any_port) {
  auto refuse = [&](const std::string& why) {
    return bad(what + ": '" + text + "' " + why);
  };
  std::string host, port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() ||
        text[close + 1] != ':')
      return refuse("is not [IPv6]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon)
      return refuse("is not HOST:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty() || host.size() > 255)
    return refuse("has no host, or one longer than 255 characters");
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos)
    return refuse("has no port number");
  auto n = std::stoul(port);
  if ((n < 1 && !any_port) || n > 65535)
    return refuse(any_port ? "has a port outside 0..65535"
                           : "has a port outside 1..65535");
  return endpoint{host, uint16_t(n)};
}

caf::expected<network_settings> compile_network(const pb::RuntimeConfig& cfg) {
  network_settings out;
  auto& n = cfg.network();
  out.certificate = n.certificate();
  out.key = n.key();
  out.cafile = n.cafile();
  out.capath = n.capath();
  bool any_tls = !n.certificate().empty() || !n.key().empty() ||
                 !n.cafile().empty() || !n.capath().empty() ||
                 !n.passphrase_file().empty();
  if (any_tls) {
    if (n.certificate().empty() || n.key().empty())
      return bad("network: TLS needs both network.certificate and "
                 "network.key (and network.cafile or network.capath)");
    if (!n.passphrase_file().empty()) {
      auto p = read_secret_file("network.passphrase_file", n.passphrase_file(),
                                errc::malformed_config);
      if (!p)
        return p.error();
      out.passphrase = std::move(*p);
    }
    if (auto err = check_tls(out))
      return err;
  }
  if (!n.token_file().empty()) {
    auto t = read_secret_file("network.token_file", n.token_file(),
                              errc::malformed_config);
    if (!t)
      return t.error();
    if (t->size() < 16)
      return bad("network.token_file: the token on the first line of '" +
                 n.token_file() + "' has " + std::to_string(t->size()) +
                 " characters, not 16 to 4096");
    out.token = std::move(*t);
  }
  if (n.join_size() > 64)
    return bad("network.join: " + std::to_string(n.join_size()) +
               " remote hosts, at most 64");
  for (auto& j : n.join()) {
    auto e = parse_endpoint(j, "network.join");
    if (!e)
      return e.error();
    out.join.push_back(std::move(*e));
  }
  if (!out.join.empty() && (!out.tls() || out.token.empty()))
    return bad("network.join: connections to other machines need TLS "
               "(network.certificate, network.key, network.cafile) and the "
               "fleet's shared token (network.token_file)");
  if (n.connect_timeout_ms() > 0) {
    if (n.connect_timeout_ms() > 3'600'000)
      return bad("network.connect_timeout_ms: " +
                 std::to_string(n.connect_timeout_ms()) +
                 " ms, at most one hour");
    out.connect_timeout = std::chrono::milliseconds{n.connect_timeout_ms()};
  }
  return out;
}

} // namespace cohort

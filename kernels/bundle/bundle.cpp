#include "kernels/bundle/bundle.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/text_format.h>

#include "kernels/bundle/rule.hpp"
#include "kernels/dtype.hpp"
#include "kernels/registry.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"

namespace cohort::kernels::bundle {

namespace {

refused refuse(refusal r, std::string detail) {
  return {r, std::move(detail)};
}

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

// A path component a manifest may use: no "." or "..", no separator, a
// portable file-name alphabet.
bool valid_component(std::string_view c) {
  if (c.empty() || c.size() > 128 || c == "." || c == "..")
    return false;
  for (char ch : c)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.'))
      return false;
  return true;
}

bool valid_path(std::string_view p) {
  if (p.empty() || p.size() > 512)
    return false;
  size_t parts = 0;
  while (true) {
    auto slash = p.find('/');
    if (!valid_component(p.substr(0, slash)) || ++parts > 8)
      return false;
    if (slash == std::string_view::npos)
      return true;
    p.remove_prefix(slash + 1);
  }
}

std::variant<std::string, refused> read_open(int fd, const std::string& where,
                                             uint64_t limit);

// Reads the regular file `rel` under `dir`, following no symbolic link on
// the way (a bundle must not point outside itself), and at most `limit`
// bytes (more is an error, not a truncation).
std::variant<std::string, refused>
read_inside(const std::string& dir, const std::string& rel, uint64_t limit) {
  auto where = dir + "/" + rel;
  fd_guard d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0)
    return refuse(
        refusal::unreadable,
        dir + ": cannot open the bundle directory: " + std::strerror(errno));
  std::string_view rest = rel;
  while (true) {
    auto slash = rest.find('/');
    auto part = std::string{rest.substr(0, slash)};
    bool last = slash == std::string_view::npos;
    // O_NONBLOCK: opening a FIFO planted in a bundle must not hang; the
    // fstat below refuses anything but a regular file.
    int flags =
        O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
    int next = ::openat(d.fd, part.c_str(), flags);
    if (next < 0) {
      auto err = errno;
      return refuse(refusal::unreadable,
                    where + ": cannot open" +
                        (err == ELOOP || err == ENOTDIR
                             ? std::string{": a symbolic link (a bundle's "
                                           "files must be inside it)"}
                             : ": " + std::string{std::strerror(err)}));
    }
    ::close(d.fd);
    d.fd = next;
    if (last)
      break;
    rest.remove_prefix(slash + 1);
  }
  return read_open(d.fd, where, limit);
}

// Reads the regular file open as `fd` (named `where` in errors), at most
// `limit` bytes.
std::variant<std::string, refused> read_open(int fd, const std::string& where,
                                             uint64_t limit) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return refuse(refusal::unreadable, where + ": not a regular file");
  if (uint64_t(st.st_size) > limit)
    return refuse(refusal::unreadable, where + ": " +
                                           std::to_string(st.st_size) +
                                           " bytes, more than the " +
                                           std::to_string(limit) + " allowed");
  std::string out;
  out.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return refuse(
          refusal::unreadable,
          where + ": cannot read: " +
              (n == 0 ? "the file shrank while read" : std::strerror(errno)));
    got += size_t(n);
  }
  return out;
}

std::string hex_digest(std::string_view bytes) {
  auto d =
      sha256({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  return to_hex(d);
}

bool valid_bundle_name(std::string_view s) {
  if (s.empty() || s.size() > 64 || !(s[0] >= 'a' && s[0] <= 'z'))
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  return true;
}

bool valid_version(std::string_view s) {
  if (s.empty() || s.size() > 64)
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' ||
          c == '+'))
      return false;
  return true;
}

bool is_hex(std::string_view s, size_t n) {
  if (s.size() != n)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
          (c >= 'A' && c <= 'F')))
      return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s)
    out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_gpu_kind(pb::BundleBlob::Kind k, bool cuda) {
  if (cuda)
    return k == pb::BundleBlob::CUDA_PTX || k == pb::BundleBlob::CUDA_CUBIN ||
           k == pb::BundleBlob::CUDA_FATBIN;
  return k == pb::BundleBlob::HIP_CODE_OBJECT;
}

// What is wrong with the kernel `k` of a manifest whose blobs are `blobs`
// (by path); empty when nothing is.
std::string
check_kernel(const pb::BundleKernel& k,
             const std::map<std::string, pb::BundleBlob::Kind>& blobs) {
  auto who = "kernel '" + k.name() + "': ";
  if (k.input_size() < 1 || k.input_size() > 8)
    return who + "takes " + std::to_string(k.input_size()) +
           " inputs; a kernel takes 1 to 8";
  std::vector<std::string> names;
  static constexpr std::string_view reserved[] = {
      "m", "n", "k", "top_k", "alpha", "min", "max", "ceil_div"};
  for (auto& in : k.input()) {
    if (!valid_c_identifier(in.name()))
      return who + "input name '" + in.name() +
             "' is not an identifier (letters, digits, '_')";
    for (auto r : reserved)
      if (in.name() == r)
        return who + "input name '" + in.name() +
               "' is taken by a scalar or a function of the rules";
    for (auto& n : names)
      if (n == in.name())
        return who + "two inputs are named '" + in.name() + "'";
    names.push_back(in.name());
    if (!parse_dtype(in.dtype()))
      return who + "input '" + in.name() + "' has element type '" + in.dtype() +
             "' (one of f32, f64, i32, i64, u8)";
  }
  if (!parse_dtype(k.output().dtype()))
    return who + "the output has element type '" + k.output().dtype() +
           "' (one of f32, f64, i32, i64, u8)";
  for (auto& s : k.scalar())
    if (s != "alpha" && s != "m" && s != "n" && s != "k" && s != "top_k")
      return who + "scalar '" + s + "' is not one of alpha, m, n, k, top_k";
  std::string why;
  auto parses = [&](const std::string& text, const char* what) {
    if (rule::parse(text, names, why))
      return true;
    why = who + what + " '" + text + "': " + why;
    return false;
  };
  if (k.output_size().empty())
    return who + "needs an output_size rule";
  if (!parses(k.output_size(), "output_size"))
    return why;
  if (k.require_size() > 16)
    return who + "has more than 16 require rules";
  for (auto& r : k.require())
    if (!parses(r, "require"))
      return why;
  if (!k.flops().empty() && !parses(k.flops(), "flops"))
    return why;
  auto cpu = blobs.find(k.cpu_blob());
  if (cpu == blobs.end() || cpu->second != pb::BundleBlob::CPU_SHARED_OBJECT)
    return who + "cpu_blob '" + k.cpu_blob() +
           "' is not a CPU_SHARED_OBJECT blob of the bundle (CPU workers, "
           "simulated GPUs and fallback need a CPU implementation)";
  if (!valid_c_identifier(k.cpu_symbol()))
    return who + "cpu_symbol '" + k.cpu_symbol() + "' is not a C identifier";
  for (bool cuda : {true, false}) {
    auto& g = cuda ? k.cuda() : k.hip();
    auto backend = std::string{cuda ? "cuda" : "hip"};
    if (g.blob().empty() && g.function().empty() && g.threads().empty() &&
        g.block() == 0)
      continue;
    auto b = blobs.find(g.blob());
    if (b == blobs.end() || !is_gpu_kind(b->second, cuda))
      return who + backend + ".blob '" + g.blob() + "' is not a " +
             (cuda ? "CUDA_PTX, CUDA_CUBIN or CUDA_FATBIN"
                   : "HIP_CODE_OBJECT") +
             " blob of the bundle";
    if (!valid_c_identifier(g.function()))
      return who + backend + ".function '" + g.function() +
             "' is not a C identifier";
    if (g.block() > 1024)
      return who + backend + ".block is " + std::to_string(g.block()) +
             "; at most 1024 threads per block";
    if (!g.threads().empty() && !parses(g.threads(), "threads"))
      return why;
  }
  return {};
}

} // namespace

const char* to_string(refusal r) {
  switch (r) {
  case refusal::unreadable:
    return "unreadable";
  case refusal::malformed:
    return "malformed";
  case refusal::unsigned_bundle:
    return "unsigned";
  case refusal::unknown_key:
    return "unknown_key";
  case refusal::revoked_key:
    return "revoked_key";
  case refusal::revoked_bundle:
    return "revoked_bundle";
  case refusal::bad_signature:
    return "bad_signature";
  case refusal::tampered_blob:
    return "tampered_blob";
  case refusal::load_failed:
    return "load_failed";
  case refusal::conflict:
    return "conflict";
  case refusal::load_crashed:
    return "load_crashed";
  case refusal::load_hung:
    return "load_hung";
  }
  return "unknown";
}

const public_key* trust_store::find(const std::string& id) const {
  if (revoked_keys.count(id) != 0)
    return nullptr;
  for (auto& k : keys)
    if (k.id() == id)
      return &k;
  return nullptr;
}

caf::expected<trust_store> trust_from_config(const pb::KernelBundles& cfg) {
  trust_store out;
  auto bad = [](std::string what) {
    return make_error(errc::malformed_config, "kernel_bundles." + what);
  };
  for (auto& path : cfg.trusted_key()) {
    fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
    if (f.fd < 0)
      return bad("trusted_key: " + path +
                 ": cannot open: " + std::strerror(errno));
    auto text = read_open(f.fd, path, 64 << 10);
    if (auto* r = std::get_if<refused>(&text))
      return bad("trusted_key: " + r->detail);
    auto key = public_key::from_pem(std::get<std::string>(text));
    if (!key)
      return bad("trusted_key: " + path +
                 ": not an Ed25519 public key in "
                 "PEM form");
    out.keys.push_back(std::move(*key));
  }
  for (auto& id : cfg.revoked_key()) {
    if (!is_hex(id, 16))
      return bad("revoked_key: '" + id + "' is not a key id (16 hex digits)");
    out.revoked_keys.insert(lower(id));
  }
  for (auto& d : cfg.revoked_bundle()) {
    if (!is_hex(d, 64))
      return bad("revoked_bundle: '" + d +
                 "' is not a manifest's SHA-256 (64 hex digits)");
    out.revoked_bundles.insert(lower(d));
  }
  return out;
}

std::variant<manifest_bytes, refused> read_manifest(const std::string& dir) {
  auto text = read_inside(dir, manifest_file, max_manifest_bytes);
  if (auto* r = std::get_if<refused>(&text))
    return *r;
  manifest_bytes out;
  out.text = std::move(std::get<std::string>(text));
  out.sha256 = hex_digest(out.text);
  return out;
}

std::variant<std::optional<pb::BundleSignature>, refused>
read_signature(const std::string& dir) {
  struct stat st {};
  auto path = dir + "/" + signature_file;
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT)
    return std::optional<pb::BundleSignature>{};
  auto text = read_inside(dir, signature_file, 4096);
  if (auto* r = std::get_if<refused>(&text))
    return *r;
  pb::BundleSignature sig;
  if (auto err = parse_text(std::get<std::string>(text), path, sig,
                            errc::invalid_arguments))
    return refuse(refusal::malformed, describe(err));
  if (!is_hex(sig.key_id(), 16) || !is_hex(sig.ed25519(), 128))
    return refuse(refusal::malformed,
                  path + ": needs key_id (16 hex digits) and ed25519 (128 "
                         "hex digits)");
  return std::optional<pb::BundleSignature>{std::move(sig)};
}

std::variant<pb::KernelBundle, refused>
parse_manifest(const std::string& text) {
  pb::KernelBundle m;
  if (auto err = parse_text(text, manifest_file, m, errc::invalid_arguments))
    return refuse(refusal::malformed, describe(err));
  auto bad = [](std::string what) {
    return refuse(refusal::malformed, std::string{manifest_file} + ": " + what);
  };
  if (!valid_bundle_name(m.name()))
    return bad("name '" + m.name() +
               "' is not valid: 1 to 64 characters of a-z, 0-9, '_', '.' and "
               "'-', starting with a letter");
  if (!valid_version(m.version()))
    return bad("version '" + m.version() +
               "' is not valid: 1 to 64 characters of letters, digits and "
               "'_.+-'");
  if (m.blob_size() < 1 || m.blob_size() > max_blobs)
    return bad("holds " + std::to_string(m.blob_size()) + " blobs; 1 to " +
               std::to_string(max_blobs) + " are allowed");
  if (m.kernel_size() < 1 || m.kernel_size() > max_bundle_kernels)
    return bad("holds " + std::to_string(m.kernel_size()) + " kernels; 1 to " +
               std::to_string(max_bundle_kernels) + " are allowed");
  std::map<std::string, pb::BundleBlob::Kind> blobs;
  uint64_t total = 0;
  for (auto& b : m.blob()) {
    auto who = "blob '" + b.path() + "': ";
    if (!valid_path(b.path()))
      return bad(who + "not a valid path (relative, at most 8 parts of "
                       "letters, digits and '_.-', no '.' or '..')");
    if (b.path() == manifest_file || b.path() == signature_file)
      return bad(who + "the manifest and its signature are not blobs");
    if (!blobs.emplace(b.path(), b.kind()).second)
      return bad(who + "listed twice");
    if (b.kind() == pb::BundleBlob::KIND_UNSPECIFIED)
      return bad(who + "needs a kind (CPU_SHARED_OBJECT, CUDA_PTX, "
                       "CUDA_CUBIN, CUDA_FATBIN or HIP_CODE_OBJECT)");
    if (!is_hex(b.sha256(), 64))
      return bad(who + "sha256 must be 64 hex digits");
    if (b.size() == 0 || b.size() > max_blob_bytes)
      return bad(who + "size " + std::to_string(b.size()) + " is not 1 to " +
                 std::to_string(max_blob_bytes) + " bytes");
    total += b.size();
  }
  if (total > max_bundle_bytes)
    return bad("its blobs add up to " + std::to_string(total) +
               " bytes, more than the " + std::to_string(max_bundle_bytes) +
               " allowed");
  std::set<std::string> names;
  for (auto& k : m.kernel()) {
    if (!names.insert(k.name()).second)
      return bad("kernel '" + k.name() + "' is defined twice");
    if (auto why = check_kernel(k, blobs); !why.empty())
      return bad(why);
  }
  return m;
}

std::variant<std::string, refused> read_blob(const std::string& dir,
                                             const pb::BundleBlob& blob) {
  auto bytes = read_inside(dir, blob.path(), max_blob_bytes);
  if (auto* r = std::get_if<refused>(&bytes))
    return *r;
  auto& b = std::get<std::string>(bytes);
  if (b.size() != blob.size())
    return refuse(refusal::tampered_blob, "blob '" + blob.path() + "' has " +
                                              std::to_string(b.size()) +
                                              " bytes; the manifest says " +
                                              std::to_string(blob.size()));
  auto d = hex_digest(b);
  auto want = lower(blob.sha256());
  if (d != want)
    return refuse(refusal::tampered_blob, "blob '" + blob.path() +
                                              "' has SHA-256 " + d +
                                              "; the manifest says " + want);
  return std::move(b);
}

std::variant<checked_bundle, refused> check_bundle(const std::string& dir,
                                                   const trust_store& trust) {
  auto mf = read_manifest(dir);
  if (auto* r = std::get_if<refused>(&mf))
    return *r;
  auto& manifest = std::get<manifest_bytes>(mf);
  auto sf = read_signature(dir);
  if (auto* r = std::get_if<refused>(&sf))
    return *r;
  auto& sig = std::get<std::optional<pb::BundleSignature>>(sf);
  if (!sig)
    return refuse(refusal::unsigned_bundle,
                  dir + ": no " + signature_file +
                      " (sign it with `cohort kernel sign`)");
  auto key_id = lower(sig->key_id());
  if (trust.revoked_keys.count(key_id) != 0)
    return refuse(refusal::revoked_key,
                  dir + ": signed by key " + key_id + ", which is revoked");
  auto* key = trust.find(key_id);
  if (key == nullptr)
    return refuse(refusal::unknown_key, dir + ": signed by key " + key_id +
                                            ", which is not among the " +
                                            std::to_string(trust.keys.size()) +
                                            " trusted keys");
  signature raw{};
  from_hex(sig->ed25519(), raw);
  if (!key->verify({reinterpret_cast<const uint8_t*>(manifest.text.data()),
                    manifest.text.size()},
                   raw))
    return refuse(refusal::bad_signature,
                  dir + ": the signature of key " + key_id +
                      " does not match the manifest (changed after signing?)");
  if (trust.revoked_bundles.count(manifest.sha256) != 0)
    return refuse(refusal::revoked_bundle, dir + ": the manifest (SHA-256 " +
                                               manifest.sha256 +
                                               ") is revoked");
  auto parsed = parse_manifest(manifest.text);
  if (auto* r = std::get_if<refused>(&parsed))
    return *r;
  checked_bundle out;
  out.dir = dir;
  out.manifest = std::move(std::get<pb::KernelBundle>(parsed));
  out.manifest_sha256 = manifest.sha256;
  out.key_id = key_id;
  for (auto& b : out.manifest.blob()) {
    auto bytes = read_blob(dir, b);
    if (auto* r = std::get_if<refused>(&bytes))
      return *r;
    out.blobs.emplace(b.path(), std::move(std::get<std::string>(bytes)));
  }
  return out;
}

std::variant<pb::BundleSignature, refused> sign_bundle(const std::string& dir,
                                                       const private_key& key) {
  auto mf = read_manifest(dir);
  if (auto* r = std::get_if<refused>(&mf))
    return *r;
  auto& manifest = std::get<manifest_bytes>(mf);
  auto parsed = parse_manifest(manifest.text);
  if (auto* r = std::get_if<refused>(&parsed))
    return *r;
  for (auto& b : std::get<pb::KernelBundle>(parsed).blob()) {
    auto bytes = read_blob(dir, b);
    if (auto* r = std::get_if<refused>(&bytes))
      return *r;
  }
  auto s = key.sign({reinterpret_cast<const uint8_t*>(manifest.text.data()),
                     manifest.text.size()});
  pb::BundleSignature out;
  out.set_key_id(key.public_key().id());
  out.set_ed25519(to_hex(s));
  return out;
}

std::string signature_text(const pb::BundleSignature& sig) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(sig, &out);
  return out;
}

} // namespace cohort::kernels::bundle
